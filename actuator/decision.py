"""What a decision function returns: an action, the state it moves the case to, why, and
the case's fields it updates; with the three shapes every decision module builds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actuator.ladder import Action
from actuator.models import Case, CaseUpdate, Reason, State


@dataclass(frozen=True)
class Decision:
    action: Action
    state: State | None = None
    code: Reason | None = None
    reason: str = ""
    updates: CaseUpdate = field(default_factory=CaseUpdate)

    @property
    def changes_state(self) -> bool:
        return self.state is not None


def wait(**updates: Any) -> Decision:
    return Decision(Action.WAIT, updates=CaseUpdate(**updates))


def move(state: State, code: Reason, reason: str, **updates: Any) -> Decision:
    return Decision(Action.MOVE, state, code, reason, CaseUpdate(**updates))


def defer(case: Case, why: tuple[Reason, str], samples: dict[str, Any]) -> Decision:
    """Not final: the case waits in `deferred` and resumes where it was once there is room."""
    code, reason = why
    return move(
        State.DEFERRED, code, f"deferred: {reason}", deferred_from=str(case.state), **samples
    )
