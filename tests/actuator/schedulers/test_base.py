"""The scheduler gate on the SIGTERM step, a pure function: only that step (and the way
back to it) asks the scheduler; its hold defers the case once and keeps it deferred
without a new transition each tick; any other objection refuses."""

from __future__ import annotations

from dataclasses import dataclass

from actuator.decisions import Action, Decision, move, wait
from actuator.models import Case, LiveState, Reason, State
from actuator.schedulers.base import Why, gate
from tests.helpers.cases import make_case, make_live

TERM = Decision(Action.TERM, State.TERMINATING, Reason.IDLE, "still idle after the grace")


@dataclass
class Gatekeeper:
    """The part of a scheduler the gate asks: what `not_ready` answers, and how often."""

    answer: Why | None
    hold: Reason = Reason.SLURM_JOB_BUSY
    asked: int = 0

    def not_ready(self, case: Case, live: LiveState) -> Why | None:
        self.asked += 1
        return self.answer


def _gate(keeper: Gatekeeper, case: Case, decision: Decision) -> Decision:
    return gate(keeper, case, make_live(), decision)  # type: ignore[arg-type]


def test_only_the_sigterm_step_is_gated() -> None:
    keeper = Gatekeeper((Reason.SLURM_JOB_BUSY, "another step of the job is busy"))
    for decision in (wait(), move(State.CANCELLED, Reason.ACTIVITY, "log written")):
        assert _gate(keeper, make_case(state=State.NOTIFIED), decision) == decision
    assert keeper.asked == 0  # not even asked


def test_a_ready_scheduler_lets_the_step_go() -> None:
    keeper = Gatekeeper(None)
    assert _gate(keeper, make_case(state=State.NOTIFIED), TERM) == TERM and keeper.asked == 1


def test_the_schedulers_hold_defers_and_any_other_objection_refuses() -> None:
    held = _gate(
        Gatekeeper((Reason.SLURM_JOB_BUSY, "another step is busy")),
        make_case(state=State.NOTIFIED),
        TERM,
    )
    assert held.action == Action.MOVE and held.state == State.DEFERRED
    assert held.code == Reason.SLURM_JOB_BUSY and held.reason.startswith("deferred: ")
    refused = _gate(
        Gatekeeper((Reason.UNKNOWN_EVIDENCE, "squeue did not answer")),
        make_case(state=State.NOTIFIED),
        TERM,
    )
    assert refused.state == State.REFUSED and refused.code == Reason.UNKNOWN_EVIDENCE


def test_a_held_case_stays_held_quietly_and_resumes_when_ready() -> None:
    deferred = make_case(state=State.DEFERRED, reason_code=Reason.SLURM_JOB_BUSY)
    resume = move(State.NOTIFIED, Reason.RESUMED, "the hold is over")
    still = _gate(Gatekeeper((Reason.SLURM_JOB_BUSY, "still busy")), deferred, resume)
    assert still == wait()  # no new transition, no new audit record, each tick
    assert _gate(Gatekeeper(None), deferred, resume) == resume
