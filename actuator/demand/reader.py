"""One reading of every configured demand source, at most once per `interval`: the requests
of all, and which failed. A failed source makes the reading unknown (never demand)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from actuator.demand.model import Demand, DemandError, DemandSource, Request

log = logging.getLogger(__name__)


class DemandReader:
    def __init__(
        self, sources: Sequence[DemandSource], *, interval: float, clock: Callable[[], float]
    ) -> None:
        self.sources, self.interval, self.clock = tuple(sources), interval, clock
        self._last: Demand | None = None
        self._lock = threading.Lock()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sources)

    def read(self) -> Demand:
        """The latest reading, read again once `interval` has passed. No source configured
        is unknown demand too: nothing says anyone waits."""
        with self._lock:
            now = self.clock()
            if self._last is not None and now - self._last.read_at < self.interval:
                return self._last
            if not self.sources:
                self._last = Demand(down={"demand": "no demand source is configured"}, read_at=now)
                return self._last
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
            self._last = Demand(tuple(requests), down, read_at=now, free=free)
            return self._last
