"""One reading of every configured demand source, at most once per `interval`: the requests
of all, and which failed. A failed source makes the reading unknown (never demand).

Under the actuator the sources are read by a thread of their own (`start`), so a slow
scheduler, API server or Prometheus never holds up the reconciler's pass (nor costs it its
lease); a pass takes the latest reading, and one older than `max_age` is unknown demand.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from actuator.demand.model import Demand, DemandError, DemandSource, Request

log = logging.getLogger(__name__)


class DemandReader:
    def __init__(
        self,
        sources: Sequence[DemandSource],
        *,
        interval: float,
        clock: Callable[[], float],
        max_age: float | None = None,
    ) -> None:
        self.sources, self.interval, self.clock = tuple(sources), interval, clock
        self.max_age = max_age if max_age is not None else 3 * interval
        self._last: Demand | None = None
        self._lock = threading.Lock()
        self._reading = threading.Lock()  # one reading at a time
        self._thread: threading.Thread | None = None
        self._stale: tuple[Demand | None, Demand] | None = None  # (of this reading, as stale)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sources)

    def start(self, stop: threading.Event) -> None:
        """Read in the background from now on, every `interval`, until `stop`."""

        def loop() -> None:
            while not stop.is_set():
                self.refresh()
                stop.wait(self.interval)

        self._thread = threading.Thread(target=loop, name="demand-reader", daemon=True)
        self._thread.start()

    def read(self) -> Demand:
        """The latest reading. Without the background thread, read again once `interval`
        has passed; with it, a reading older than `max_age` (or none yet) is unknown."""
        if self._thread is None:
            with self._lock:
                last = self._last
            if last is None or self.clock() - last.read_at >= self.interval:
                return self.refresh()
            return last
        with self._lock:
            last = self._last
        age = self.clock() - last.read_at if last is not None else float("inf")
        if age <= self.max_age:
            assert last is not None
            return last
        # Too old (or none yet): unknown; the same value until a new reading, so a pass sees
        # no change to record.
        if self._stale is None or self._stale[0] is not last:
            if last is None:
                stale = Demand(
                    down={"demand": "not read yet"}, read_at=self.clock(), placeholder=True
                )
            else:
                why = f"no reading for {age:.0f}s"
                stale = Demand(
                    down={name: why for name in self.names} or {"demand": why}, read_at=self.clock()
                )
            self._stale = (last, stale)
        return self._stale[1]

    def refresh(self) -> Demand:
        """Read every source now. No source configured is unknown demand too: nothing
        says anyone waits."""
        with self._reading:
            started = self.clock()
            if not self.sources:
                demand = Demand(down={"demand": "no demand source is configured"}, read_at=started)
            else:
                demand = self._read_all(started)
            with self._lock:
                self._last = demand
            return demand

    def _read_all(self, started: float) -> Demand:
        requests: list[Request] = []
        down: dict[str, str] = {}
        free: dict[str, int] = {}
        for source in self.sources:
            try:
                reading = source.read()
                requests.extend(reading.requests)
                for node, n in reading.free.items():  # two schedulers: the lower count
                    free[node] = min(n, free.get(node, n))
            except DemandError as exc:
                down[source.name] = str(exc)[:300]
            except Exception as exc:  # a source's bug is unknown demand, not a crash
                log.exception("demand source %s failed", source.name)
                down[source.name] = f"{type(exc).__name__}: {exc}"[:300]
        # Stamped when the reading began: its age counts the time the sources took.
        return Demand(tuple(requests), down, read_at=started, free=free)
