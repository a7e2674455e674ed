"""Reading every source (actuator/demand/reader.py): one failed source makes demand unknown;
readings are spaced; read in the background, a slow source never holds a pass up."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from actuator.demand import DemandError, Reading, Request
from actuator.demand.reader import DemandReader
from tests.support import wait_until


class _Source:
    def __init__(self, name: str, *answers: object) -> None:
        self.name, self.answers, self.reads = name, itertools.cycle(answers), 0

    def read(self) -> Reading:
        self.reads += 1
        answer = next(self.answers)
        if isinstance(answer, Exception):
            raise answer
        return Reading(answer, {"n1": 1})  # type: ignore[arg-type]


@pytest.mark.reliability(51)
def test_one_failed_source_makes_demand_unknown_and_reads_are_spaced() -> None:
    now = [0.0]
    job = Request(source="slurm", key="1", who="job 1")
    slurm = _Source("slurm", (job,))
    broken = _Source("promql:a100", DemandError("down"), ())
    buggy = _Source("kubernetes", ValueError("a bug"), ())
    reader = DemandReader([slurm, broken, buggy], interval=10.0, clock=lambda: now[0])
    first = reader.read()
    assert not first.known and first.requests == (job,) and first.free == {"n1": 1}
    assert first.down == {"promql:a100": "down", "kubernetes": "ValueError: a bug"}
    assert reader.read() is first and slurm.reads == 1  # within the interval: no new read
    now[0] = 10.0
    second = reader.read()
    assert second.known and second.requests == (job,)
    assert not DemandReader([], interval=1.0, clock=lambda: 0.0).read().known


def test_in_the_background_a_slow_source_never_holds_a_pass_up() -> None:
    """Read by its own thread, a source that takes long leaves `read()` answering at once:
    the last reading while it is fresh, unknown once it is older than max_age."""
    release = threading.Event()
    calls = []

    class Slow:
        name = "slurm"

        def read(self) -> Reading:
            calls.append(1)
            if len(calls) > 1:
                release.wait(10)  # the second reading hangs
            return Reading((Request(source="slurm", key="1", who="job 1"),))

    stop = threading.Event()
    reader = DemandReader([Slow()], interval=0.05, clock=time.monotonic, max_age=0.5)
    try:
        assert reader.read().known  # not started: read when asked
        reader.start(stop)
        wait_until(lambda: len(calls) >= 2, 5, 0.01)
        started = time.monotonic()
        fresh = reader.read()
        assert time.monotonic() - started < 0.1 and fresh.known and len(fresh.requests) == 1
        stale = wait_until(lambda: (d := reader.read()) and not d.known and d, 5, 0.05)
        assert "no reading for" in stale.down["slurm"]
        assert reader.read() is stale  # the same value while nothing new comes
    finally:
        stop.set()
        release.set()
