"""What people do to cases and the breaker (actuator/operations.py), apart from how they
ask: typed results the API, the keep page and the keep socket each translate."""

from __future__ import annotations

from pathlib import Path

from actuator.models import AlertmanagerPayload, Case, State
from actuator.operations import (
    BreakerWas,
    Refused,
    Why,
    receive_alerts,
    release,
    reset_breaker,
    snooze,
)
from actuator.runtime import Runtime
from actuator.store.cases import insert_case
from tests.helpers.api import alert, body, make_runtime
from tests.helpers.cases import make_case


def _case(rt: Runtime, state: State) -> int:
    case = make_case(id=0, state=state, pid=4242 + len(rt.store.list_cases(limit=100)))
    with rt.store._tx() as conn:
        insert_case(conn, case, {})
    return case.id


def test_snooze_keeps_a_live_case_and_refuses_with_the_reason(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path)
    kept = snooze(rt, _case(rt, State.NOTIFIED), 3600, "token", "a long evaluation")
    assert isinstance(kept, Case) and kept.state == State.SNOOZED
    assert snooze(rt, 999, 60, "token", "") == Refused(Why.NOT_FOUND, "no case 999")
    late = snooze(rt, _case(rt, State.TERMINATING), 60, "token", "")
    assert isinstance(late, Refused) and late.why == Why.NOT_NOW
    records = [r for r in rt.audit.tail(10) if r["event"] == "snooze"]
    assert len(records) == 1 and records[0]["by"] == "token"  # refusals change nothing


def test_nothing_changes_when_the_audit_record_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "audit").mkdir()
    rt = make_runtime(
        tmp_path, storage={"database": str(tmp_path / "db"), "audit_log": str(tmp_path / "audit")}
    )
    case_id = _case(rt, State.NOTIFIED)
    refused = snooze(rt, case_id, 60, "token", "")
    assert isinstance(refused, Refused) and refused.why == Why.AUDIT_UNAVAILABLE
    assert rt.store.get_case(case_id).state == State.NOTIFIED  # type: ignore[union-attr]
    assert isinstance(reset_breaker(rt, "token", "x"), Refused)


def test_release_only_a_notified_case(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path)
    released = release(rt, _case(rt, State.NOTIFIED))
    assert isinstance(released, Case) and released.release_requested_mono is not None
    pending = release(rt, _case(rt, State.PENDING))
    assert isinstance(pending, Refused) and pending.why == Why.NOT_NOW


def test_breaker_reset_says_what_it_was(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path)
    rt.store.set_breaker(True, 100.0, "5 of 6 flagged")
    was = reset_breaker(rt, "token", "checked")
    assert was == BreakerWas(True, 100.0, "5 of 6 flagged")
    assert rt.store.breaker()[0] is False


def test_alerts_are_received_without_any_transport(tmp_path: Path) -> None:
    """The webhook's ingest is an operation: a payload in, episodes and audit records out,
    no Flask. A bad alert is refused alone; a re-delivery is on the record."""
    rt = make_runtime(tmp_path)
    bad = alert(fingerprint="")  # no fingerprint: not an alert Alertmanager sends
    payload = AlertmanagerPayload.model_validate(body(alert(), bad))
    first = receive_alerts(rt, payload)
    assert (first.received, first.recorded, first.rejected) == (2, 1, 1)
    again = receive_alerts(rt, AlertmanagerPayload.model_validate(body(alert())))
    assert again.duplicates
    events = [r["event"] for r in rt.audit.tail(10)]
    assert events == ["alert_rejected", "alert_duplicate"]
    assert [e.fingerprint for e in rt.store.pending_episodes()] == ["abc123"]
