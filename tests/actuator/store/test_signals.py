"""Signals recorded per case, on each backend (the SIGTERM counts the rate limits judge by
are tested with the rest of a step's guard: test_guard.py)."""

from __future__ import annotations

from actuator.store import open_store
from actuator.store.signals import SignalSent


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
