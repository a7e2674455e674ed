"""A node's pass, recorded and committed together (actuator/node_batch.py): what a state
change records on its case comes back as an update; what was done is saved at the end of
the pass, and kept for the next one when the store fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from actuator.audit import AuditLog
from actuator.decisions import Action, Decision
from actuator.demand.planner import DemandPlanner
from actuator.executor import Executor, Outcome, Step
from actuator.models import UNSET, Case, CaseUpdate, Member, State
from actuator.node import Node
from actuator.node_batch import Committed, Decided, NodeBatch, NodeBatches, decided, state_change
from actuator.notifications.notify import NullNotifier
from actuator.policy import Notice
from actuator.signalled import SignalledTrees
from actuator.store import Fence, Store, StoreUnavailable, Transition
from actuator.store.signals import SignalSent
from tests.helpers.cases import T0, eff, make_case, make_live


class Slurm:
    def claim(self, case: Case, live: Any) -> CaseUpdate:
        return CaseUpdate(slurm_job="4242")

    def owner(self, case: Case, live: Any) -> dict[str, str] | None:
        return {"email": "lead@example.org", "language": "en"}


def test_a_state_change_records_the_nodes_proof_as_an_update_not_in_place() -> None:
    case = make_case(labels={"user": "mallory"})
    live = make_live(members=[Member(4243, 9, 1000)])
    before = repr(case)
    term = Decision(Action.TERM, State.TERMINATING)
    update = state_change(case, term, live, eff(), Slurm(), T0, 50.0)
    assert repr(case) == before  # nothing written in place
    assert update.term_at == T0 and update.term_mono == 50.0
    assert update.members == [Member(4243, 9, 1000)]
    assert update.slurm_job == "4242"  # the scheduler carries the signal out
    assert isinstance(update.facts, dict) and update.facts["user"] == live.user
    assert update.owner is UNSET  # asked of the workload only for a notice

    notify = Decision(Action.NOTIFY, State.NOTIFIED)
    assert state_change(case, notify, live, eff(), Slurm(), T0, 50.0).owner == {
        "email": "lead@example.org",
        "language": "en",
    }


def test_another_process_under_the_pid_proves_no_facts() -> None:
    case = make_case()
    other = make_live(start_ticks=case.start_ticks + 1)
    update = state_change(case, Decision(Action.KILL, State.KILLING), other, eff(), None, T0, 5.0)
    assert update.facts is UNSET and update.kill_at == T0


@pytest.fixture
def batches(tmp_path: Path) -> NodeBatches:
    store = Store(str(tmp_path / "db"))
    store.init()
    audit = AuditLog(tmp_path / "audit.jsonl")
    executor = Executor(
        audit=audit, notifier=NullNotifier(), gate=Notice(), clock=lambda: T0, mono=lambda: T0
    )
    planner = DemandPlanner(
        None,
        None,
        store=store,
        audit=audit,
        node=lambda name: None,
        clock=lambda: T0,
        mono=lambda: T0,
    )

    def failed(case: Case, exc: Exception) -> None:
        raise AssertionError(f"case {case.id}: {exc}")

    return NodeBatches(
        store, audit, executor, planner, fence=lambda: Fence("r1", 0.0, 30.0), step_failed=failed
    )


def test_what_was_done_is_saved_at_the_end_of_the_pass_and_kept_when_the_store_fails(
    batches: NodeBatches,
) -> None:
    """Signals sent and reclaims counted are records of what was done: one commit each per
    node's pass; a store that fails keeps them for the next pass's."""
    store = batches.store
    batch = batches.begin("n")
    batch.done(make_case(id=7), Outcome(sent=(SignalSent(7, 4242, "SIGTERM", T0),)))
    batch.done(make_case(id=9), Outcome(bumps=(("reclaims", "demand", 1),)))
    assert store.signals_for(7) == [] and store.metric_snapshot()["named"] == {}

    real = store.record_signals

    def unavailable(sent: Any) -> None:
        raise StoreUnavailable("disk full")

    store.record_signals = unavailable  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        batches.end("n")
    store.record_signals = real  # type: ignore[method-assign]
    batches.end("n")  # the next pass's end
    assert store.signals_for(7) == [{"ts": T0, "pid": 4242, "signal": "SIGTERM"}]
    assert store.metric_snapshot()["named"]["reclaims"] == {"demand": 1}
    batches.end("n")  # nothing twice
    assert len(store.signals_for(7)) == 1
    assert store.metric_snapshot()["named"]["reclaims"] == {"demand": 1}


def test_a_notices_outcome_is_applied_and_saved_with_the_samples(batches: NodeBatches) -> None:
    case = make_case(id=3, state=State.NOTIFIED)
    batch = batches.begin(case.node)
    batch.done(case, Outcome(update=CaseUpdate(notified_at=T0, notified_mono=7.0)))
    assert case.notified_mono == 7.0 and batch.samples == [case]


def test_an_uncommitted_decision_is_dropped_at_the_end_of_the_pass(
    batches: NodeBatches,
) -> None:
    """Neither recorded nor carried out: the next pass decides afresh."""
    batch = batches.begin("n")
    batch.decided.append(object())  # type: ignore[arg-type]
    batches.end("n")
    assert batches.begin("n").decided == []  # the next pass starts with none
    assert batches.audit.tail(5) == []


def _committed(action: Action, state: State) -> Decided:
    case, live, d = make_case(), make_live(), Decision(action, state)
    record, evidence = decided(case, d, live, case.state, {}, T0)
    step = Step(case, d, live, eff(), cast(Node, None), None, T0)
    return Decided(step, case.state, record, Transition(case, state, "", evidence, T0), 1.0)


@pytest.mark.parametrize(
    ("action", "state", "turn"),
    [
        (Action.NOTIFY, State.NOTIFIED, False),
        (Action.MOVE, State.OBSERVED, False),  # its rehearsal: a dry run at the agent
        (Action.MOVE, State.CANCELLED, False),
        (Action.MOVE, State.RECLAIMED, True),  # the demand planner watches the freed GPU
        (Action.SUSPEND, State.SUSPENDING, False),  # its own node's, for minutes maybe
        (Action.RESUME, State.RESUMING, False),
        (Action.TERM, State.TERMINATING, True),  # the rate limits count it
        (Action.KILL, State.KILLING, True),
    ],
)
def test_a_batch_waits_for_the_turn_when_it_signals_or_reclaims(
    action: Action, state: State, turn: bool
) -> None:
    """A node's notices, observations, checkpoints and restores are carried out after the
    reconciler's turn; one step that signals or reclaims a GPU keeps the whole batch in it."""
    notice = _committed(Action.NOTIFY, State.NOTIFIED)
    batch = NodeBatch(SignalledTrees(lambda node, boot: {}))
    steps = [(notice, True), (_committed(action, state), True)]
    assert Committed(batch, steps).needs_turn is turn
