"""Intake first: while Alertmanager is delivering, the webhook's answers come before the
reconciler's next pass.

In an alert storm the webhook and the reconciler share the actuator's cores (and, on one
host, its workers' interpreters): every pass re-checks cases through the agents while
deliveries wait for a turn, and the acknowledgements' tail grew with it (the storm at 32
in flight: ack p99 153-187 ms with the reconciler running, 56-75 ms without it; 250 nodes,
docs/performance.md). Nothing is lost by deciding a little later: every delivery is
recorded before it is answered, and the reconciler re-checks everything live before it
acts. So between passes the reconciler waits while a delivery arrived on this host within
`INTAKE_QUIET`, for at most `reconciler.intake_first` in a row; then it makes its pass
whatever arrives, so a stream of deliveries delays decisions, never stops them.

The host's workers share the last delivery's time on one page of memory, made before
gunicorn forks them: a storm's deliveries reach every worker, the lease holder's among
them. A mark that is not a time a delivery could have had (not a number, in the future) is
no delivery: the reconciler does not wait on it.
"""

from __future__ import annotations

import math
import mmap
import struct
import threading
import time
from collections.abc import Callable

from actuator.store import StoreUnavailable

INTAKE_QUIET = 0.25  # s without a delivery: the storm's intake is over (or paused)
_TIME = struct.Struct("d")


class DeliveryClock:
    """When the last webhook delivery arrived on this host (CLOCK_MONOTONIC, which every
    process of the host reads alike), on a page its forked workers share."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._page = mmap.mmap(-1, _TIME.size)  # anonymous, MAP_SHARED: one page after fork
        _TIME.pack_into(self._page, 0, -math.inf)

    def mark(self) -> None:
        _TIME.pack_into(self._page, 0, self.clock())

    def last(self) -> float:
        return float(_TIME.unpack_from(self._page, 0)[0])

    def wait_now(self, waited: float, most: float) -> float:
        """How long the reconciler waits now, having waited `waited` in a row already."""
        return intake_wait(self.last(), self.clock(), waited, most)


def wait_for_intake(
    deliveries: DeliveryClock,
    most: float,
    every: float,
    stop: threading.Event,
    progressed: Callable[[], bool],
) -> None:
    """Wait while deliveries arrive, at most `most` in a row, calling `progressed` every
    `every` seconds of the wait (the reconciler renews its lease and its progress mark:
    waiting on purpose is not a stall). A False from it (the lease is another's), or a
    store that cannot be written, ends the wait: the next tick says so."""
    began = renewed = deliveries.clock()
    while not stop.is_set():
        wait = deliveries.wait_now(deliveries.clock() - began, most)
        if wait <= 0:
            return
        stop.wait(min(wait, every))
        if deliveries.clock() - renewed < every:
            continue
        renewed = deliveries.clock()
        try:
            if not progressed():
                return
        except StoreUnavailable:
            return


def intake_wait(last: float, now: float, waited: float, most: float) -> float:
    """Seconds to wait before the next pass: until no delivery arrived for `INTAKE_QUIET`,
    and never past `most` in a row. A `last` that no delivery could have had (not a
    number, later than now) is none."""
    if not math.isfinite(last) or last > now or waited >= most:
        return 0.0
    left = INTAKE_QUIET - (now - last)
    if left <= 0:
        return 0.0
    return min(left, most - waited)
