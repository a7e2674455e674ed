"""When a case waiting out its grace is looked at again.

A case the owner was warned about waits (its grace, or in `reclaim_when: demand` for
someone to need its GPU) and is re-checked live to see whether the process worked again,
exited or lost its alert. Every tick for every such case is most of the actuator's work
once cases pile up (a whole /proc tree walk, the NVML reading, log and heartbeat stats per
case, or an agent's call), so a waiting case is re-checked every `every` seconds instead,
and at every tick from its deadline on. A signal is never sent on an old reading: the step
that decides SIGTERM re-checks live and looks once more just before it (reconciler.advance).
What waiting longer costs is only how soon a process that worked again, exited, or whose
alert resolved leaves its case (at most `every` later).

A new case likewise waits out its first CPU window (`idle.cpu_window`) between its first
two re-checks: nothing can be judged before the window is full (decisions.roll_cpu), and
the looks in between only noticed an exit or a resolved alert up to one window sooner.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from actuator.demand.fit import Choice
from actuator.models import Case, State
from actuator.policy import Effective, ReclaimWhen


@dataclass(frozen=True)
class Checked:
    """The last live re-check of a case: when (monotonic) and the demand plan it saw."""

    mono: float
    demand: tuple[str, str] | None


def demand_key(choice: Choice | None) -> tuple[str, str] | None:
    """What of a demand choice can change the case's next step: its verdict and request."""
    if choice is None:
        return None
    return str(choice.verdict), choice.request.ref if choice.request is not None else ""


def recheck_due(
    case: Case,
    last: Checked | None,
    choice: Choice | None,
    mono: float,
    every: float,
    cpu_window: float = 0.0,
) -> bool:
    """Whether this tick must re-check the case live (pure; `mono` is the reconciler's)."""
    if last is None:
        return True  # never looked at by this worker
    if case.state == State.PENDING and case.cpu_at is not None and case.cpu_rate is None:
        # Its CPU window opened at the last look (taken before `last.mono`): full by now?
        return mono - last.mono >= cpu_window
    if case.state == State.SUSPENDED:  # waits for its owner, its suspend_max or the memory
        asked = case.resume_requested_mono is not None and mono >= case.resume_requested_mono
        return asked or mono - last.mono >= every
    if case.state != State.NOTIFIED or mono - last.mono >= every:
        return True
    if case.notified_mono is None or case.release_requested_mono is not None:
        return True  # a notice to retry, or the owner said go ahead
    try:
        eff = Effective.model_validate(case.effective)
    except ValidationError:  # none recorded, or one this release cannot read: look now
        return True
    if eff.reclaim_when == ReclaimWhen.DEMAND:
        if demand_key(choice) != last.demand:
            return True  # demand appeared, changed or went away: the owner is told now
        started = case.demand_mono
        if started is None:
            return False  # nobody waits for this GPU: nothing is due
    else:
        started = case.notified_mono
    return mono >= started + eff.grace + case.notice_extra_grace
