"""What the demo reads of one moment (actuator/demo/observe.py's Snapshot): a process's
alert, firing before pending, and the signals sent to its tree over all its cases, in the
order they were sent. (The Observer polling a real stack: tests/e2e/test_demo.py.)"""

from __future__ import annotations

from actuator.demo.observe import EVER_SIGNALLED_STATES, Snapshot


def _alert(pid: int, name: str, state: str) -> dict[str, object]:
    return {"labels": {"alertname": name, "pid": str(pid)}, "state": state}


def test_a_firing_alert_is_shown_before_a_pending_one() -> None:
    snap = Snapshot(
        at=0.0,
        alerts=[
            _alert(7, "GpuProcessStalled", "pending"),
            _alert(7, "GpuProcessIdle", "firing"),
            _alert(8, "GpuProcessIdle", "pending"),
        ],
    )
    assert snap.alert_for(7) == ("GpuProcessIdle", "firing")
    assert snap.alert_for(8) == ("GpuProcessIdle", "pending")
    assert snap.alert_for(9) is None


def test_signals_over_all_of_a_process_s_cases_in_the_order_sent() -> None:
    snap = Snapshot(
        at=0.0,
        cases=[  # newest first, as the API lists them
            {"id": 2, "target": {"pid": 7}, "state": "killing"},
            {"id": 1, "target": {"pid": 7}, "state": "cancelled"},
            {"id": 3, "target": {"pid": 8}, "state": "terminating"},
        ],
        signals={
            2: [{"signal": "SIGKILL", "ts": 30.0}, {"signal": "SIGTERM", "ts": 20.0}],
            1: [{"signal": "SIGTERM", "ts": 10.0}],
            3: [{"signal": "SIGTERM", "ts": 5.0}],
        },
    )
    assert [c["id"] for c in snap.cases_for(7)] == [2, 1]
    assert snap.signals_for(7) == ["SIGTERM", "SIGTERM", "SIGKILL"]
    assert snap.signals_for(9) == []


def test_the_states_that_mean_a_signal_went_out() -> None:
    assert {"terminating", "killing", "reclaimed"} <= EVER_SIGNALLED_STATES
    assert not {"pending", "notified", "cancelled", "refused", "observed"} & EVER_SIGNALLED_STATES
