"""What an owner does to their own process, apart from how they ask: keep it (its case, or
in advance of any case), release it, revoke a keep. The keep page and the node's keep
socket only translate; this is the one door.

Every keep is judged by `decisions.keep_refusal`, as GPU_RECLAIMER_KEEP and the pod's keep
annotation are (`decisions.owner_allowance`): within the rule that applies to the process
(the rule recorded on its case; before any case, the rule the node's facts select) and its
[keep_min, keep_max], refused while a repeat step holds the owner's keeps for an SRE (root
and the SRE groups are that approval), and never past the site's `notifier.keep_max`. A
keep in advance is a keep: the same bounds, the same step. Nothing is kept when the rule
cannot be told. Every change writes its audit record first (`operations`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from actuator import operations
from actuator.audit import AuditError
from actuator.audit_records import KeepRevoked, KeptAhead
from actuator.keep_bounds import keep_refusal, recorded_rule
from actuator.models import Case, Reason, State
from actuator.operations import Refused, Why
from actuator.policy import Effective
from actuator.runtime import Runtime
from exporter.units import format_duration


@dataclass(frozen=True)
class Owner:
    """Who asks: named for the audit; `privileged` for root and the SRE groups."""

    by: str
    privileged: bool = False


@dataclass(frozen=True)
class Process:
    """A process with no case yet, as the node proved it (its start ticks and boot)."""

    node: str
    pid: int
    start_ticks: int
    boot_id: str
    uid: int


@dataclass(frozen=True)
class Kept:
    case: int | None  # None: kept in advance of any case
    state: str
    until: float


@dataclass(frozen=True)
class Released:
    case: int | None
    state: str
    revoked_keep: int | None = None  # the keep in advance that ended, if any


def judge_keep(
    rule: Effective | None, seconds: float, owner: Owner, site_max: float
) -> Refused | None:
    """Why this keep is refused; None when it may be kept (pure)."""
    if not 0 < seconds <= site_max:
        return Refused(Why.OUT_OF_BOUNDS, f"keep for at most {format_duration(site_max)}")
    if rule is None:
        return Refused(
            Why.RULE_UNKNOWN,
            "cannot tell which rule applies to this process now: nothing kept; try again",
        )
    if owner.privileged:  # root and the SRE groups are the repeat step's approval
        rule = rule.model_copy(update={"keep_needs_sre": False})
    refusal = keep_refusal(rule, seconds)
    if refusal is None:
        return None
    return Refused(Why.NEEDS_SRE if rule.keep_needs_sre else Why.OUT_OF_BOUNDS, refusal)


SelectedRule = Callable[[], Effective | None]


def _none_selected() -> Effective | None:
    return None


def rule_for_keep(case: Case | None, selected: SelectedRule = _none_selected) -> Effective | None:
    """The rule a keep is judged by: the one recorded on the case; before any decision (or
    with no case), the one the node's facts select now, asked only then."""
    recorded = recorded_rule(case) if case is not None else None
    return recorded or selected()


def may_keep(
    owner: Owner,
    seconds: float,
    *,
    case: Case | None,
    site_max: float,
    selected: SelectedRule = _none_selected,
) -> Refused | None:
    """Whether `keep` would accept this: what a page offers and checks before it spends a
    one-time link (the same judgement as `keep`, no side effect)."""
    return judge_keep(rule_for_keep(case, selected), seconds, owner, site_max)


def keep(
    rt: Runtime,
    owner: Owner,
    seconds: float,
    *,
    case: Case | None,
    process: Process | None = None,
    selected: SelectedRule = _none_selected,
    site_max: float,
) -> Kept | Refused:
    """Keep the case (or, with no case, the process in advance) for `seconds`. `selected`:
    the rule the node's facts select for the process, asked when the case has none
    recorded (or there is no case)."""
    rule = rule_for_keep(case, selected)
    refused = judge_keep(rule, seconds, owner, site_max)
    if refused is not None:
        return refused
    if case is not None and case.state == State.SUSPENDED:  # kept: first brought back
        resumed = operations.request_resume(rt, case.id, seconds, owner.by)
        if isinstance(resumed, Refused):
            return resumed
        return Kept(resumed.id, "resuming", rt.clock() + seconds)
    if case is not None:
        kept = operations.snooze(rt, case.id, seconds, owner.by, "kept by its owner")
        if isinstance(kept, Refused):
            return kept
        return Kept(kept.id, str(kept.state), kept.snoozed_until or 0.0)
    if process is None:
        return Refused(Why.NOT_FOUND, "no case and no process to keep")
    now = rt.clock()
    try:
        rt.audit.write(
            KeptAhead(
                uid=process.uid,
                pid=process.pid,
                start_ticks=process.start_ticks,
                until=now + seconds,
                by=owner.by,
                rule=rule.rule if rule is not None else None,
            )
        )
    except AuditError as exc:
        return Refused(Why.AUDIT_UNAVAILABLE, str(exc))
    added = rt.store.add_keep(
        process.node,
        process.pid,
        process.start_ticks,
        process.boot_id,
        process.uid,
        now + seconds,
        now,
        owner.by,
    )
    return Kept(None, "kept ahead", added.until)


def release(
    rt: Runtime, owner: Owner, *, case: Case | None, process: Process | None
) -> Released | Refused:
    """The owner is done with it. A warned case: "release now" (the rest of the grace is
    skipped; every other check still runs). A kept case: its keep ends now, and it is
    judged again as any case is. No case, a keep in advance: the keep is revoked."""
    if case is not None and case.state == State.NOTIFIED:
        released = operations.release(rt, case.id)
        if isinstance(released, Refused):
            return released
        return Released(released.id, str(released.state))
    revoked = _revoke_ahead(rt, owner, process) if process is not None else None
    if isinstance(revoked, Refused):
        return revoked
    if case is not None and case.state == State.SNOOZED:
        ended = operations.end_snooze(rt, case.id, owner.by, Reason.SNOOZE_EXPIRED)
        if isinstance(ended, Refused):
            return ended
        return Released(ended.id, str(ended.state), revoked)
    if case is None and revoked is not None:
        return Released(None, "keep revoked", revoked)
    what = f"case {case.id} is {case.state}" if case is not None else "no open case or keep"
    return Refused(Why.NOT_NOW, f"{what}: nothing to release")


def revoke(rt: Runtime, owner: Owner, process: Process) -> Released | Refused:
    """End the process's keep in advance."""
    revoked = _revoke_ahead(rt, owner, process)
    if isinstance(revoked, Refused):
        return revoked
    if revoked is None:
        return Refused(Why.NOT_FOUND, f"process {process.pid} has no keep to revoke")
    return Released(None, "keep revoked", revoked)


def _revoke_ahead(rt: Runtime, owner: Owner, process: Process) -> int | Refused | None:
    """The id of the process's active keep in advance, revoked (audited first); None when
    it has none."""
    found = rt.store.active_keep(
        process.node, process.pid, process.start_ticks, process.boot_id, rt.clock()
    )
    if found is None:
        return None
    try:
        rt.audit.write(KeepRevoked(uid=process.uid, pid=process.pid, keep=found.id, by=owner.by))
    except AuditError as exc:
        return Refused(Why.AUDIT_UNAVAILABLE, str(exc))
    rt.store.revoke_keep(found.id)
    return found.id
