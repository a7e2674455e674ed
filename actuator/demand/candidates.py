"""The cases demand may choose from, as `Candidate`s (pure: cases and a clock in).

A case is a candidate under `reclaim_when: demand` once its owner was told it is idle (a
delivered first notice); one already signalled for a request stays as capacity in flight,
so the same wait never makes a second GPU go.
"""

from __future__ import annotations

from collections.abc import Iterable

from actuator.demand.fit import Candidate
from actuator.ladder import SIGNALLED_STATES
from actuator.models import Case, State
from actuator.notifications.notice import ProvenFacts
from actuator.policy import ReclaimWhen

CHOOSABLE = frozenset({State.NOTIFIED, State.DEFERRED})


def on_demand(case: Case) -> bool:
    """The case follows `reclaim_when: demand` (as recorded at its last transition)."""
    return (case.effective or {}).get("reclaim_when") == ReclaimWhen.DEMAND


def candidate(case: Case, now: float, heartbeat_recent: float) -> Candidate | None:
    if not on_demand(case):
        return None
    signalled = case.state in SIGNALLED_STATES
    if signalled and not case.demand_for:
        return None
    if not signalled and (case.state not in CHOOSABLE or case.notified_mono is None):
        return None
    facts = ProvenFacts.of_case(case)
    activity = facts.last_activity if facts else None
    return Candidate(
        case=case.id,
        node=case.node,
        gpu=case.uuid,
        memory_bytes=case.gpu_memory_bytes or (facts.memory_bytes if facts else 0) or 0,
        idle_since=case.idle_since,
        processes=max(1, len(case.members)),
        heartbeat_recent=activity is not None and now - activity < heartbeat_recent,
        kept_before=case.snoozed_until is not None,
        serving=case.demand_for or "",
        signalled=signalled,
    )


def candidates(cases: Iterable[Case], now: float, heartbeat_recent: float) -> list[Candidate]:
    found = (candidate(c, now, heartbeat_recent) for c in cases)
    return [c for c in found if c is not None]


def pids_on(cases: Iterable[Case], node: str, gpu: str) -> set[int]:
    """Every process the candidates on one GPU stand for (the target and its members)."""
    out: set[int] = set()
    for case in cases:
        if (case.node, case.uuid) == (node, gpu):
            out |= {case.pid, *(m.pid for m in case.members)}
    return out
