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


def _reconciler(rt: Runtime, deliveries: DeliveryClock) -> Reconciler:
    return build_reconciler(
        rt.config, rt.store, rt.audit, {}, NullNotifier(), holder="r1", deliveries=deliveries
    )


def _timed_wait(reconciler: Reconciler) -> float:
    began = time.monotonic()
    reconciler.intake_first(threading.Event())
    return time.monotonic() - began


def _delivering(deliveries: DeliveryClock, every: float = 0.02) -> threading.Event:
    """A storm: a delivery every 20 ms until the event is set."""
    done = threading.Event()

    def deliver() -> None:
        while not done.wait(every):
            deliveries.mark()

    deliveries.mark()
    threading.Thread(target=deliver, daemon=True).start()
    return done


def test_the_reconciler_waits_for_the_deliveries_to_pause(tmp_path: Path) -> None:
    deliveries = DeliveryClock()
    rt = make_runtime(tmp_path, reconciler={"intake_first": "10s"})
    reconciler = _reconciler(rt, deliveries)
    assert _timed_wait(reconciler) < 0.05  # nothing delivered: no wait
    storm = _delivering(deliveries)
    threading.Timer(0.5, storm.set).start()  # half a second of deliveries, then quiet
    took = _timed_wait(reconciler)
    assert 0.5 <= took < 0.5 + INTAKE_QUIET + 0.5


def test_a_storm_that_goes_on_delays_the_pass_by_the_cap_and_no_more(tmp_path: Path) -> None:
    deliveries = DeliveryClock()
    rt = make_runtime(tmp_path, reconciler={"intake_first": "0.6s"})
    reconciler = _reconciler(rt, deliveries)
    storm = _delivering(deliveries)
    try:
        took = _timed_wait(reconciler)
    finally:
        storm.set()
    assert 0.6 <= took < 1.2


def test_the_cap_off_means_no_wait(tmp_path: Path) -> None:
    deliveries = DeliveryClock()
    rt = make_runtime(tmp_path, reconciler={"intake_first": "0s"})
    storm = _delivering(deliveries)
    try:
        assert _timed_wait(_reconciler(rt, deliveries)) < 0.05
    finally:
        storm.set()


def test_a_waiting_reconciler_keeps_its_lease_and_reports_progress(tmp_path: Path) -> None:
    """Waiting on purpose is not a stall: the lease (0.3 s here) is renewed every third of
    its life, with the progress mark /-/ready reads, so no other worker takes over and
    readiness stays green through a wait three leases long."""
    deliveries = DeliveryClock()
    rt = make_runtime(tmp_path, reconciler={"intake_first": "1s", "lease_ttl": "0.3s"})
    reconciler = _reconciler(rt, deliveries)
    assert reconciler.tick()
    progress = rt.store.progress()
    assert progress is not None and progress[2] is not None
    first = progress[2]
    storm = _delivering(deliveries)
    taken: list[bool] = []
    rival = threading.Timer(0.8, lambda: taken.append(rt.store.acquire_lease("r2", rt.mono(), 0.3)))
    rival.start()
    try:
        took = _timed_wait(reconciler)
    finally:
        storm.set()
    rival.join()
    assert took >= 1.0
    assert taken == [False]  # still r1's, two leases into the wait
    progress = rt.store.progress()
    assert progress is not None and progress[0] == "r1" and progress[2] is not None
    assert progress[2] > first + 0.5
    assert create_app(rt).test_client().get("/-/ready").status_code == 200
