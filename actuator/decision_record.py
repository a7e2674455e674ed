"""The shape of a decision's records, in one place: every `decision` line of the audit log
(a case created, re-armed, moved by a step) is built here and nowhere else, and so is the
evidence a step stores on the case's timeline, which `why` reads back (`StepEvidence`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class StepEvidence:
    """What a step stores on its case's timeline: the decision it records and, after a live
    re-check, what the node saw and the thresholds it was judged against."""

    action: str
    code: str | None
    decision_id: str
    live: dict[str, Any] | None = None
    thresholds: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "action": self.action,
            "code": self.code,
            "decision_id": self.decision_id,
        }
        if self.live is not None:
            out["live"] = self.live
            out["thresholds"] = self.thresholds
        return out

    @classmethod
    def from_json(cls, raw: object) -> StepEvidence | None:
        """A timeline entry's evidence read back; None when it is not a step's (a case's
        creation, an operator's snooze). A part of the wrong type reads as absent."""
        if not isinstance(raw, dict):
            return None
        live, thresholds, decision = raw.get("live"), raw.get("thresholds"), raw.get("decision_id")
        if not isinstance(decision, str) and not isinstance(live, dict):
            return None
        return cls(
            action=str(raw.get("action") or ""),
            code=raw.get("code") if isinstance(raw.get("code"), str) else None,
            decision_id=decision if isinstance(decision, str) else "",
            live=live if isinstance(live, dict) else None,
            thresholds=thresholds if isinstance(thresholds, dict) else None,
        )
