"""What people and Alertmanager do to the actuator, apart from how they ask: alerts
received, snooze (keep), release now, a keep ended, breaker and repeat resets. Each returns
a typed result (done, or refused with why); the HTTP API, the keep page and the keep socket
each translate it to their own protocol (an owner's keep goes through
actuator/owner_actions.py, which calls these).

Every operation on a case or the breaker writes its audit record before the change, and
changes nothing when that record cannot be written.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from actuator.audit import AuditError
from actuator.audit_records import AlertDuplicate, AlertRejected, BreakerReset, RepeatReset, Snoozed
from actuator.models import AlertmanagerPayload, Case, Reason, State, split_alerts
from actuator.runtime import Runtime
from actuator.store import Ingest
from exporter.units import format_duration

log = logging.getLogger(__name__)

MAX_SNOOZE = 7 * 86400.0
SNOOZABLE = frozenset({State.PENDING, State.NOTIFIED, State.SNOOZED, State.DEFERRED})
ATTEMPTS = 20  # compare-and-set retries: the reconciler moves a case's version every tick


class Why(StrEnum):
    NOT_FOUND = "not_found"
    NOT_NOW = "not_allowed_in_this_state"
    KEPT_CHANGING = "kept_changing"
    AUDIT_UNAVAILABLE = "audit_unavailable"
    OUT_OF_BOUNDS = "out_of_bounds"  # outside the rule's (or the site's) keep bounds
    NEEDS_SRE = "needs_sre"  # a repeat step holds the owner's keeps for an SRE
    RULE_UNKNOWN = "rule_unknown"  # the rule for the process cannot be told now


# A refusal as an HTTP status, for the API and the keep page (503: retry once the audit log
# is back).
HTTP_STATUS = {
    Why.NOT_FOUND: 404,
    Why.NOT_NOW: 409,
    Why.KEPT_CHANGING: 409,
    Why.AUDIT_UNAVAILABLE: 503,
    Why.OUT_OF_BOUNDS: 422,
    Why.NEEDS_SRE: 403,
    Why.RULE_UNKNOWN: 503,
}


@dataclass(frozen=True)
class Refused:
    why: Why
    detail: str


@dataclass(frozen=True)
class BreakerWas:
    was_open: bool
    since: float | None
    reason: str


def _not_snoozable(case: Case) -> Refused:
    return Refused(
        Why.NOT_NOW,
        f"case {case.id} is {case.state}; only live cases before any signal can be snoozed",
    )


def snooze(
    rt: Runtime,
    case_id: int,
    duration: float,
    by: str,
    why: str,
    evidence: dict[str, Any] | None = None,
) -> Case | Refused:
    """Keep a live case from escalating for `duration` seconds, before any signal."""
    found = rt.store.get_case(case_id)
    if found is None:
        return Refused(Why.NOT_FOUND, f"no case {case_id}")
    if found.state not in SNOOZABLE:
        return _not_snoozable(found)
    try:
        rt.audit.write(
            Snoozed(case=case_id, until=rt.clock() + duration, duration=duration, by=by, reason=why)
        )
    except AuditError as exc:
        return Refused(Why.AUDIT_UNAVAILABLE, str(exc))
    reason = f"snoozed for {format_duration(duration)} by {by}: {why}".rstrip(": ")
    # The reconciler saves samples on every tick, which moves the row's version: re-read
    # and try again rather than hand the operator a conflict that is only bookkeeping.
    for _ in range(ATTEMPTS):
        now = rt.clock()
        found.snoozed_until = now + duration
        found.snoozed_until_mono = rt.mono() + duration
        found.cpu_seconds = found.cpu_rate = found.cpu_at = None
        found.release_requested_mono = None  # a keep overrides an earlier "release now"
        updated = rt.store.transition(
            found,
            State.SNOOZED,
            reason=reason,
            evidence=evidence or {"by": by},
            now=now,
            reason_code=Reason.SNOOZED,
        )
        if updated is not None:
            return updated
        found = rt.store.get_case(case_id)
        if found is None or found.state not in SNOOZABLE:
            break
    if found is not None and found.state not in SNOOZABLE:
        return _not_snoozable(found)
    return Refused(Why.KEPT_CHANGING, f"case {case_id} kept changing; retry")


def request_resume(rt: Runtime, case_id: int, keep: float, by: str) -> Case | Refused:
    """A suspended case's owner wants it back: the reconciler restores it at its next step
    (onto its own GPU, where there is room) and then keeps it for `keep` seconds. Audited
    first; compare-and-set, retried like the snooze."""
    try:
        rt.audit.write(
            Snoozed(
                case=case_id,
                until=rt.clock() + keep,
                duration=keep,
                by=by,
                reason="resume asked: restored, then kept",
            )
        )
    except AuditError as exc:
        return Refused(Why.AUDIT_UNAVAILABLE, str(exc))
    for _ in range(ATTEMPTS):
        case = rt.store.get_case(case_id)
        if case is None:
            return Refused(Why.NOT_FOUND, f"no case {case_id}")
        if case.state != State.SUSPENDED:
            return Refused(
                Why.NOT_NOW, f"case {case.id} is {case.state}: only a suspended case is resumed"
            )
        case.resume_requested_mono = rt.mono()
        case.resume_keep = keep
        case.restore_attempts = 0
        case.restore_waits, case.restore_room = 0, ""  # asked again: looked at, told, anew
        if rt.store.save_samples(case):
            return case
    return Refused(Why.KEPT_CHANGING, f"case {case_id} kept changing; retry")


def release(rt: Runtime, case_id: int) -> Case | Refused:
    """Mark a notified case "release now": the reconciler skips the rest of the grace (every
    other check still runs). Compare-and-set, retried like the snooze."""
    for _ in range(ATTEMPTS):
        case = rt.store.get_case(case_id)
        if case is None:
            return Refused(Why.NOT_FOUND, f"no case {case_id}")
        if case.state != State.NOTIFIED:
            return Refused(
                Why.NOT_NOW, f"case {case.id} is {case.state}: only a notified case can be released"
            )
        case.release_requested_mono = rt.mono()
        if rt.store.save_samples(case):
            return case
    return Refused(Why.KEPT_CHANGING, f"case {case_id} kept changing; retry")


def end_snooze(rt: Runtime, case_id: int, by: str, code: Reason) -> Case | Refused:
    """End a snoozed case's keep now (its owner is done): the case is pending again and is
    judged as any case is, a new notice and grace included. Audited first; compare-and-set,
    retried like the snooze."""
    try:
        rt.audit.write(
            Snoozed(
                case=case_id,
                until=rt.clock(),
                duration=0.0,
                by=by,
                reason="released by its owner: the keep ends now",
            )
        )
    except AuditError as exc:
        return Refused(Why.AUDIT_UNAVAILABLE, str(exc))
    for _ in range(ATTEMPTS):
        case = rt.store.get_case(case_id)
        if case is None:
            return Refused(Why.NOT_FOUND, f"no case {case_id}")
        if case.state != State.SNOOZED:
            return Refused(Why.NOT_NOW, f"case {case.id} is {case.state}: no keep to end")
        # As when a snooze expires: the wall-clock `snoozed_until` stays (it was kept once:
        # demand's choice weighs that), the wait on the store's clock ends now.
        case.snoozed_until_mono = None
        case.cpu_seconds = case.cpu_rate = case.cpu_at = None
        updated = rt.store.transition(
            case,
            State.PENDING,
            reason=f"the keep was ended by {by}",
            evidence={"by": by},
            now=rt.clock(),
            reason_code=code,
        )
        if updated is not None:
            return updated
    return Refused(Why.KEPT_CHANGING, f"case {case_id} kept changing; retry")


def receive_alerts(rt: Runtime, payload: AlertmanagerPayload) -> Ingest:
    """A validated Alertmanager payload recorded as episodes, whatever transport brought
    it: alerts that cannot name a process are refused one by one (audited, never costing
    the good ones of the payload), re-deliveries are recorded as such, and alerts
    Alertmanager truncated are logged (absent is not resolved)."""
    alerts, rejected = split_alerts(payload)
    if rejected:
        with contextlib.suppress(AuditError):
            rt.audit.write_many(
                [
                    AlertRejected(
                        fingerprint=r.fingerprint,
                        group=payload.groupKey[:200],
                        errors=list(r.errors),
                    )
                    for r in rejected
                ]
            )
    ingest = rt.store.record_alerts(alerts, len(rejected), rt.clock())
    if ingest.duplicates:  # a re-delivery is harmless, and on the record
        with contextlib.suppress(AuditError):
            rt.audit.write_many(
                [
                    AlertDuplicate(fingerprint=fp, starts_at=starts, deliveries=n)
                    for fp, starts, n in ingest.duplicates
                ]
            )
    if payload.truncatedAlerts:
        log.warning(
            "group %s: %d alerts truncated by Alertmanager (absent is not resolved)",
            payload.groupKey,
            payload.truncatedAlerts,
        )
    return ingest


def reset_repeats(rt: Runtime, user: str, by: str, reason: str) -> int | Refused:
    """Repeat habits: count `user`'s reclaims afresh from now (audited first); the count
    it had within the window is returned."""
    if not rt.store.knows_user(user):  # a typo would reset nobody and answer as if done
        return Refused(Why.NOT_FOUND, f"no case has named the user {user!r}")
    window = rt.config.repeat.window if rt.config.repeat else 0.0
    had = rt.store.reclaims_since(user, rt.clock() - window) if window else 0
    try:
        rt.audit.write(RepeatReset(user=user, had=had, by=by, reason=reason))
    except AuditError as exc:
        return Refused(Why.AUDIT_UNAVAILABLE, str(exc))
    rt.store.reset_repeats(user, rt.clock())
    return had


def reset_breaker(rt: Runtime, by: str, reason: str) -> BreakerWas | Refused:
    """Close the circuit breaker (whether or not it was open)."""
    was_open, since, why = rt.store.breaker()
    try:
        rt.audit.write(BreakerReset(was_open=was_open, opened_reason=why, by=by, reason=reason))
    except AuditError as exc:
        return Refused(Why.AUDIT_UNAVAILABLE, str(exc))
    rt.store.set_breaker(False, rt.clock(), f"reset by {by}: {reason}")
    return BreakerWas(was_open, since, why)
