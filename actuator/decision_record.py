"""The shape of a decision's audit record, in one place: every `decision` line of the
audit log (a case created, re-armed, moved by a step) is built here and nowhere else."""

from __future__ import annotations

import uuid

from actuator.audit_records import DecisionMade
from actuator.models import Case, State


def decision_record(
    case: Case,
    previous: State | None,
    action: str,
    reason: str,
    now: float,
    *,
    code: str | None = None,
    rearmed_from: int | None = None,
) -> DecisionMade:
    """The record of one decision on `case` (pure but for its fresh id). `previous`: the
    state it left (None for a case created or re-armed: `to` names the state it starts in)."""
    return DecisionMade(
        decision_id=uuid.uuid4().hex[:16],
        case=case.id or None,
        from_state=str(previous) if previous else None,
        to=str(case.state) if previous is None else None,
        action=str(action),
        reason=reason,
        node=case.node,
        pid=case.pid,
        start_time=case.start_time,
        start_ticks=case.start_ticks,
        boot_id=case.boot_id,
        uid=case.uid,
        uuid=case.uuid,
        user=case.user,
        alertname=case.alertname,
        alert={"fingerprint": case.fingerprint, "starts_at": case.starts_ts},
        mode=case.mode,
        rule=case.rule,
        decided_at=now,
        timings={
            "episode_age": now - case.starts_ts,
            "notified_at": case.notified_at,
            "term_at": case.term_at,
            "kill_at": case.kill_at,
        },
        code=code,
        rearmed_from=rearmed_from,
    )
