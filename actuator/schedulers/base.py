"""The interface every scheduler implements, and the gate on the ladder's gated rung."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from actuator.audit_records import KubeReclaim, KubeVerified, SlurmCancel, SlurmVerified
from actuator.decisions import Decision, defer, move, wait
from actuator.ladder import Verb, rung_for
from actuator.models import Case, CaseUpdate, LiveState, Reason, State

Why = tuple[Reason, str]


@dataclass(frozen=True)
class Step:
    """What a scheduler did for one escalation step."""

    name: str  # recorded like a signal: SCANCEL, EVICT, DELETE, ...
    ok: bool
    detail: str
    record: KubeReclaim | SlurmCancel  # its audit record (the executor adds the outcome)


class Scheduler(Protocol):
    hold: Reason  # the deferral reason of a case this scheduler holds back

    def applies(self, live: LiveState) -> bool:
        """The process runs under this scheduler (from the node's evidence)."""
        ...

    def not_ready(self, case: Case, live: LiveState) -> Why | None:
        """None when the step may go ahead; else why not (refusal or this hold)."""
        ...

    def claim(self, case: Case, live: LiveState) -> CaseUpdate:
        """At the SIGTERM step: what to record on the case so that the scheduler carries
        it out (an empty update: it does not)."""
        ...

    def owns(self, case: Case) -> bool: ...

    def owner(self, case: Case, live: LiveState) -> dict[str, str] | None:
        """Who the workload names as its owner, for the notice (None: the process's user)."""
        ...

    def keep_asked(self, live: LiveState) -> str | None:
        """An owner's ask, made through the scheduler, not to be judged idle before some
        runtime ("WHERE=VALUE", judged against the rule's bounds); None: none asked."""
        ...

    def facts(self, live: LiveState) -> dict[str, str]:
        """What the scheduler says of the workload that policy rules match on (asked of
        every scheduler, whether or not it gates the process)."""
        ...

    def reclaim(self, case: Case, verb: Verb, *, dry_run: bool = False) -> Step:
        """The rung's verb in the scheduler's terms (actuator/ladder.py), as enforcement
        takes it (or, with `dry_run`, what it would take: nothing is changed, and the Step
        says what would have been done)."""
        ...

    def verify(self, case: Case) -> KubeVerified | SlurmVerified: ...


def gate(scheduler: Scheduler, case: Case, live: LiveState, decision: Decision) -> Decision:
    """Only a gated rung (SIGTERM's) and the way back to it are gated: an exit, a resolved
    alert or a refusal goes through as for any case. A held case stays held without a new
    transition each tick."""
    resuming = case.state == State.DEFERRED and case.reason_code == scheduler.hold
    rung = rung_for(decision.action)
    gated = rung is not None and rung.gated
    if not gated and not (resuming and decision.code == Reason.RESUMED):
        return decision
    why = scheduler.not_ready(case, live)
    if why is None:
        return decision
    code, reason = why
    if code != scheduler.hold:
        return move(State.REFUSED, code, reason)
    if resuming:
        return wait()
    return defer(case, why, {})
