"""Intake first: the reconciler waits between passes while the host's webhook is taking
deliveries, never past `reconciler.intake_first`, keeping its lease meanwhile; a forged or
impossible mark of the last delivery makes it wait for nothing."""

from __future__ import annotations

import dataclasses
import math
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from actuator.app import create_app
from actuator.compose import build_reconciler
from actuator.intake_first import INTAKE_QUIET, DeliveryClock, intake_wait
from actuator.notifications.notify import NullNotifier
from actuator.reconciler import Reconciler
from actuator.runtime import Runtime
from tests.helpers.api import AUTH, alert, body, make_runtime


def test_the_wait_lasts_until_the_deliveries_pause_and_never_past_the_cap() -> None:
    assert intake_wait(last=10.0, now=10.0, waited=0.0, most=60.0) == INTAKE_QUIET
    assert intake_wait(last=10.0, now=10.1, waited=0.0, most=60.0) == pytest.approx(
        INTAKE_QUIET - 0.1
    )
    assert intake_wait(last=10.0, now=10.0 + INTAKE_QUIET, waited=0.0, most=60.0) == 0.0
    assert intake_wait(last=10.0, now=10.0, waited=59.9, most=60.0) == pytest.approx(0.1)
    assert intake_wait(last=10.0, now=10.0, waited=60.0, most=60.0) == 0.0
    assert intake_wait(last=10.0, now=10.0, waited=0.0, most=0.0) == 0.0  # turned off


@pytest.mark.parametrize("forged", [math.nan, math.inf, -math.inf, 10.5, 1e300])
def test_a_mark_no_delivery_could_have_left_is_none(forged: float) -> None:
    """Not a number, never, or later than now (a clock read on another boot, a torn or
    planted page): no delivery, no wait."""
    assert intake_wait(last=forged, now=10.0, waited=0.0, most=60.0) == 0.0


def test_a_forged_page_makes_the_reconciler_wait_for_nothing() -> None:
    clock = DeliveryClock(clock=lambda: 100.0)
    for forged in (math.nan, math.inf, 1e18):
        struct.pack_into("d", clock._page, 0, forged)  # whatever the shared page holds
        assert clock.wait_now(waited=0.0, most=60.0) == 0.0
    clock._page[:] = b"\xff" * len(clock._page)  # not even a float: a NaN
    assert clock.wait_now(waited=0.0, most=60.0) == 0.0


def test_a_forked_worker_s_delivery_is_seen_by_its_siblings() -> None:
    """The page is made before gunicorn forks its workers: a mark in one is read in the
    others (the lease holder's among them)."""
    clock = DeliveryClock(clock=lambda: 42.0)
    assert clock.last() == -math.inf
    child = os.fork()
    if child == 0:  # a worker taking a delivery
        try:
            clock.mark()
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    assert clock.last() == 42.0


def test_only_an_authenticated_delivery_is_marked(tmp_path: Path) -> None:
    deliveries = DeliveryClock()
    rt = dataclasses.replace(make_runtime(tmp_path), deliveries=deliveries)
    client = create_app(rt).test_client()
    assert client.post("/api/v1/alerts", json=body(alert())).status_code == 401
    assert deliveries.last() == -math.inf  # a stranger cannot hold the reconciler back
    before = time.monotonic()
    assert client.post("/api/v1/alerts", json=body(alert()), headers=AUTH).status_code == 200
    assert before <= deliveries.last() <= time.monotonic()


class SteppedTime(threading.Event):
    """The reconciler's waits on a clock of the test's own: each wait moves it on by the
    time waited, then the storm (while it lasts) delivers once more, so a loaded machine
    cannot make the deliveries look paused or the wait look long."""

    def __init__(self, storm_until: float = math.inf) -> None:
        super().__init__()
        self.now, self.storm_until = 1000.0, storm_until
        self.deliveries = DeliveryClock(clock=lambda: self.now)
        self.at: list[tuple[float, Callable[[], None]]] = []  # (when, what) during the wait

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None and timeout > 0
        self.now += timeout
        for when, what in [(w, f) for w, f in self.at if w <= self.now]:
            self.at.remove((when, what))
            what()
        if self.now < self.storm_until:
            self.deliveries.mark()
        return self.is_set()

    def timed_wait(self, reconciler: Reconciler) -> float:
        began = self.now
        reconciler.intake_first(self)
        return self.now - began


def _reconciler(rt: Runtime, time_: SteppedTime) -> Reconciler:
    return build_reconciler(
        rt.config,
        rt.store,
        rt.audit,
        {},
        NullNotifier(),
        holder="r1",
        mono=lambda: time_.now,
        deliveries=time_.deliveries,
    )


def test_the_reconciler_waits_for_the_deliveries_to_pause(tmp_path: Path) -> None:
    time_ = SteppedTime(storm_until=1000.5)  # half a second of deliveries, then quiet
    reconciler = _reconciler(make_runtime(tmp_path), time_)
    assert reconciler.tick()
    assert time_.timed_wait(reconciler) == 0.0  # nothing delivered yet: no wait
    time_.deliveries.mark()
    took = time_.timed_wait(reconciler)
    assert 0.5 <= took <= 0.5 + INTAKE_QUIET + 1e-6


def test_a_storm_that_goes_on_delays_the_pass_by_the_cap_and_no_more(tmp_path: Path) -> None:
    time_ = SteppedTime()
    rt = make_runtime(tmp_path)  # reconciler.intake_first: 60 s, the default
    reconciler = _reconciler(rt, time_)
    assert reconciler.tick()  # it waits after a pass it made, holding the lease
    time_.deliveries.mark()
    assert time_.timed_wait(reconciler) == pytest.approx(rt.config.reconciler.intake_first)


def test_a_waiter_that_no_longer_holds_the_lease_stops_waiting(tmp_path: Path) -> None:
    time_ = SteppedTime()
    rt = make_runtime(tmp_path)
    reconciler = _reconciler(rt, time_)
    assert reconciler.tick()
    time_.at = [(1005.0, lambda: rt.store.release_lease("r1"))]  # taken from it meanwhile
    time_.deliveries.mark()
    took = time_.timed_wait(reconciler)
    assert 5.0 <= took <= 10.0  # at its next renewal, a third of the lease later


def test_the_cap_off_means_no_wait(tmp_path: Path) -> None:
    time_ = SteppedTime()
    reconciler = _reconciler(make_runtime(tmp_path, reconciler={"intake_first": "0s"}), time_)
    time_.deliveries.mark()
    assert time_.timed_wait(reconciler) == 0.0


def test_a_waiting_reconciler_keeps_its_lease_and_reports_progress(tmp_path: Path) -> None:
    """Waiting on purpose is not a stall: the lease (10 s) is renewed every third of its
    life, with the progress mark /-/ready reads (30 s), so no other worker takes over and
    readiness stays green through a wait of six leases."""
    time_ = SteppedTime()
    rt = dataclasses.replace(make_runtime(tmp_path), mono=lambda: time_.now)
    reconciler = _reconciler(rt, time_)
    assert reconciler.tick()
    taken: list[bool] = []
    ready: list[int] = []
    client = create_app(rt).test_client()
    time_.at = [
        (1025.0, lambda: taken.append(rt.store.acquire_lease("r2", time_.now, 10.0))),
        (1045.0, lambda: ready.append(client.get("/-/ready").status_code)),
    ]
    time_.deliveries.mark()
    assert time_.timed_wait(reconciler) == pytest.approx(60.0)
    assert taken == [False]  # still r1's, two leases into the wait
    assert ready == [200]  # 45 s since the last pass, past stall_after: progress was marked
    progress = rt.store.progress()
    assert progress is not None and progress[0] == "r1"
    assert progress[2] is not None and progress[2] >= 1055.0


def test_a_new_holder_lets_the_deliveries_land_before_its_first_pass(tmp_path: Path) -> None:
    """A take-over or a restart in the middle of a storm: the worker that takes the lease
    waits for the deliveries arriving before its first pass, as between passes, and the
    pass then takes what landed meanwhile. One that held the lease already does not wait
    before its pass (it waited after its last one)."""
    time_ = SteppedTime(storm_until=1000.5)
    rt = make_runtime(tmp_path)
    reconciler = _reconciler(rt, time_)
    client = create_app(rt).test_client()
    time_.at = [(1000.3, lambda: client.post("/api/v1/alerts", json=body(alert()), headers=AUTH))]
    time_.deliveries.mark()
    assert reconciler.tick(time_)
    assert 0.5 <= time_.now - 1000.0 <= 0.5 + INTAKE_QUIET + 1e-6
    assert rt.store.pending_episodes() == []  # delivered during the wait, taken by the pass
    reconciler.holding = True
    time_.storm_until = math.inf
    time_.deliveries.mark()
    before = time_.now
    assert reconciler.tick(time_)
    assert time_.now == before
