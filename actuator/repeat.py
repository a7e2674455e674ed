"""Repeat habits: what follows when an owner's jobs keep being reclaimed (pure).

Per owner, the reclaims within `repeat.window` (since an SRE's reset, if later) are counted;
the last step whose `after` that count reaches applies to the owner's next case: a shorter
grace (never a longer one) and, if it says so, the project's contact copied on the notice
and the owner's own keeps held for an SRE (who keeps through the API's snooze).
The notice says which step applies and why.
"""

from __future__ import annotations

from actuator.policy import Effective, Repeat, RepeatStep


def repeat_step(prior: int, repeat: Repeat) -> RepeatStep | None:
    """The step `prior` earlier reclaims within the window reach; None below the first."""
    reached = [s for s in repeat.steps if prior >= s.after]
    return reached[-1] if reached else None


def with_repeat(eff: Effective, prior: int, repeat: Repeat | None) -> Effective:
    """`eff` with the step that applies, if any (the grace only ever shortened)."""
    step = repeat_step(prior, repeat) if repeat is not None else None
    if step is None or repeat is None:
        return eff
    grace = eff.grace if step.grace is None else min(eff.grace, step.grace)
    return eff.model_copy(
        update={
            "grace": grace,
            "repeat_prior": prior,
            "repeat_window": repeat.window,
            "copy_project": step.copy_project,
            "keep_needs_sre": step.keep_needs_sre,
        }
    )
