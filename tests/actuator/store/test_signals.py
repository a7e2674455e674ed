"""Signals recorded per case, and the counts the rate limits judge by, on each backend:
SIGTERMs since a moment on the store's own clock (a reading of another boot's clock says
nothing about "since"), per node or fleet-wide; processes flagged per node."""

from __future__ import annotations

from actuator.models import State
from actuator.store import open_store
from actuator.store.cases import insert_case
from actuator.store.signals import SignalSent
from tests.helpers.cases import make_case


def test_signals_are_kept_per_case_in_order(database: str) -> None:
    store = open_store(database)
    store.init()
    store.record_signals([SignalSent(1, 4242, "SIGTERM", 100.0)])
    store.record_signals([SignalSent(2, 5151, "SIGTERM", 101.0)])
    store.record_signals([SignalSent(1, 4242, "SIGKILL", 110.0)])
    assert store.signals_for(1) == [
        {"ts": 100.0, "pid": 4242, "signal": "SIGTERM"},
        {"ts": 110.0, "pid": 4242, "signal": "SIGKILL"},
    ]


def test_a_passs_signals_are_recorded_together(database: str) -> None:
    store = open_store(database)
    store.init()
    store.record_signals([SignalSent(1, pid, "SIGTERM", 100.0) for pid in (4242, 4243, 4244)])
    store.record_signals([])  # nothing was sent: nothing recorded
    assert [(s["pid"], s["ts"]) for s in store.signals_for(1)] == [
        (4242, 100.0),
        (4243, 100.0),
        (4244, 100.0),
    ]


def test_terminations_are_counted_on_this_clock_per_node_and_in_all(database: str) -> None:
    store = open_store(database)
    store.init()
    clock = store.clock_id
    cases = [
        make_case(id=1, node="a", pid=11, term_mono=500.0, clock=clock, state=State.RECLAIMED),
        make_case(id=2, node="a", pid=12, term_mono=900.0, clock=clock, state=State.RECLAIMED),
        make_case(id=3, node="b", pid=13, term_mono=950.0, clock=clock, state=State.RECLAIMED),
        # Another boot's clock: its 990 is no moment of this one.
        make_case(
            id=4, node="a", pid=14, term_mono=990.0, clock="other-boot", state=State.RECLAIMED
        ),
        make_case(id=5, node="a", pid=15, term_mono=None, clock=clock),  # never signalled
    ]
    with store._tx() as conn:
        for case in cases:
            insert_case(conn, case, {})
    assert store.terminations_since(800.0, clock) == 2
    assert store.terminations_since(800.0, clock, node="a") == 1
    assert store.terminations_since(0.0, clock, node="a") == 2
    assert store.terminations_since(0.0, "other-boot") == 1
