"""A node's pass, recorded and committed together.

The decisions of a node's pass are recorded (their audit records fsync'd together) and their
states committed together, fenced by the lease, before any of them is carried out; nothing
is carried out that is not both recorded and committed. What carrying them out did (the
executor's `Outcome`: signals sent, counters, a notice's outcome) is committed at the end
of the node's pass with the samples of the cases that only waited. A case changes only
through updates: the decision's own, what its state change records (`state_change`), and
its notice's outcome.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actuator.audit import AuditError, AuditLog
from actuator.audit_records import DecisionAborted, DecisionMade
from actuator.decision_record import StepEvidence, decision_record
from actuator.decisions import Decision
from actuator.demand.planner import DemandPlanner
from actuator.executor import Executor, Outcome, Rehearsed, Step
from actuator.ladder import LIMITED, Action, commits_alone, rung_for, takes_tree
from actuator.models import Case, CaseUpdate, LiveState, State
from actuator.notifications.notice import ProvenFacts, disagreements
from actuator.policy import Effective
from actuator.schedulers import Scheduler
from actuator.signalled import SignalledTrees
from actuator.store import Fence, LeaseLost, Store, StoreUnavailable, Transition
from actuator.store.counters import Bump
from actuator.store.signals import SignalSent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decided:
    """A decision in the node's batch, to be recorded and committed with it."""

    step: Step
    previous: State
    record: DecisionMade  # its audit record
    move: Transition  # its state's compare-and-set
    mono: float


# What a node's batch may carry out after the reconciler's turn (Committed.needs_turn).
OUTSIDE_TURN = frozenset({Action.NOTIFY, Action.MOVE, Action.WAIT, Action.SUSPEND, Action.RESUME})


@dataclass(frozen=True)
class Committed:
    """A node's steps recorded and committed, in the order they are carried out, each with
    whether its compare-and-set was made."""

    batch: NodeBatch
    steps: list[tuple[Decided, bool]]

    @property
    def needs_turn(self) -> bool:
        """Whether carrying these out must wait for the reconciler's turn: a signal (kept
        beside the rate limits' count as it always was) and a reclaimed GPU, which goes to
        the demand planner the pass shares. A notice, an observation's rehearsal (a dry run
        at the agent), a checkpoint or a restore acts only on its own node, which one
        thread advances at a time, and may take seconds (a slow mail server) or minutes (a
        checkpoint's copy): it holds no other node's steps."""
        return any(
            b.step.decision.action not in OUTSIDE_TURN or b.step.decision.state == State.RECLAIMED
            for b, _ in self.steps
        )


@dataclass
class NodeBatch:
    """One node's pass: the decisions to commit, the cases whose samples (or notice's
    outcome) to save, and the records of what was done."""

    signalled: SignalledTrees  # the trees signalled so far, this pass's next decisions see
    decided: list[Decided] = field(default_factory=list)
    samples: list[Case] = field(default_factory=list)
    sent: list[SignalSent] = field(default_factory=list)
    bumps: list[Bump] = field(default_factory=list)

    def done(self, case: Case, outcome: Outcome) -> None:
        self.sent += outcome.sent
        self.bumps += outcome.bumps
        if outcome.update is not None:  # a notice's or a restore's, saved with the samples
            outcome.update.apply_to(case)
            self.samples.append(case)


def state_change(
    case: Case,
    d: Decision,
    live: LiveState | None,
    eff: Effective,
    scheduler: Scheduler | None,
    now: float,
    mono: float,
) -> CaseUpdate:
    """What a change of state records on its case: the node's proven facts (never the
    alert's claims), the rule, the signal's moment and process tree, the scheduler that
    carries it out, and whom a workload names to be told."""
    update = CaseUpdate(rule=eff.rule, mode=str(eff.mode), effective=eff.model_dump())
    if live is not None and live.user:
        update = update.then(CaseUpdate(user=live.user))
    if live is not None and _this_process(case, live):
        facts = ProvenFacts.from_live(case, live)
        update = update.then(CaseUpdate(facts=facts.to_json(), project=facts.project or None))
    rung = rung_for(d.action)
    if rung is not None and rung.stamps is not None:
        stamped: dict[str, Any] = {rung.stamps.wall: now, rung.stamps.mono: mono}
        update = update.then(CaseUpdate(**stamped))
    if rung is not None and rung.takes_tree:
        assert live is not None  # a rung that takes the tree is decided on a live look
        update = update.then(
            CaseUpdate(
                members=list(live.members),
                # a checkpointed process holds nothing now: its footprint stays recorded
                gpu_memory_bytes=live.gpu_memory_bytes or case.gpu_memory_bytes,
            )
        )
        if scheduler is not None:
            update = update.then(scheduler.claim(case, live))
    elif d.action == Action.NOTIFY and live is not None and scheduler is not None:
        owner = scheduler.owner(case, live)
        if owner:
            update = update.then(CaseUpdate(owner=owner))
    return update


def _this_process(case: Case, live: LiveState) -> bool:
    """Another process under the PID proves nothing about ours."""
    return live.exists and (live.start_ticks, live.boot_id) == (case.start_ticks, case.boot_id)


def decided(
    case: Case,
    d: Decision,
    live: LiveState | None,
    previous: State,
    thresholds: dict[str, Any],
    now: float,
) -> tuple[DecisionMade, dict[str, Any]]:
    """The decision's audit record and the evidence its state change stores."""
    disagree = None
    if live is not None and _this_process(case, live):  # the alert claimed otherwise?
        disagree = disagreements(case.labels, ProvenFacts.from_live(case, live)) or None
    evidence = live.evidence() if live is not None else None
    record = dataclasses.replace(
        decision_record(case, previous, d.action, d.reason, now, code=d.code),
        to=str(d.state),
        live=evidence,
        thresholds=thresholds,
        alert_disagrees=disagree,  # the node won
    )
    stored = StepEvidence(
        action=str(d.action),
        code=d.code,
        decision_id=record.decision_id,
        live=evidence,
        thresholds=thresholds if evidence is not None else None,  # what `why` judges by
    )
    return record, stored.to_json()


class NodeBatches:
    """The open batch of each node in a pass, and their commits."""

    def __init__(
        self,
        store: Store,
        audit: AuditLog,
        executor: Executor,
        planner: DemandPlanner,
        *,
        fence: Callable[[], Fence],
        step_failed: Callable[[Case, Exception], None],
    ) -> None:
        self.store, self.audit, self.executor, self.planner = store, audit, executor, planner
        self.fence, self.step_failed = fence, step_failed
        self._open: dict[str, NodeBatch] = {}
        # Limited-rung (SIGTERM) decisions committed so far: a guard read before the last
        # of them is read again (actuator/guard_reader.py). Batches are recorded only in
        # the reconciler's turn, so one step at a time counts.
        self.limited_made = 0
        # What was done but not yet saved (the store failed): saved with the next pass's.
        self._unsaved: dict[str, tuple[list[SignalSent], list[Bump]]] = {}

    def begin(self, node: str) -> NodeBatch:
        """The node's batch for a pass (one opened by a step outside a pass is kept, its
        signalled trees read afresh)."""
        batch = self._open.get(node)
        if batch is None:
            batch = self._open[node] = NodeBatch(SignalledTrees(self.store.signalled_trees))
        else:
            batch.signalled = SignalledTrees(self.store.signalled_trees)
        return batch

    def signalled_on(self, node: str) -> SignalledTrees:
        batch = self._open.get(node)  # outside a node's pass: read afresh
        return batch.signalled if batch else SignalledTrees(self.store.signalled_trees)

    def sample(self, case: Case) -> None:
        """A case that only waited, with evidence for later steps: saved at the end."""
        (self._open.get(case.node) or self.begin(case.node)).samples.append(case)

    def add(self, case: Case, decided: Decided) -> None:
        (self._open.get(case.node) or self.begin(case.node)).decided.append(decided)

    def end(self, node: str) -> None:
        """The node's pass is over: decisions not committed are dropped (neither recorded
        nor carried out); samples and what was done are saved, one commit each."""
        batch = self._open.pop(node, None)
        sent, bumps = self._unsaved.pop(node, ([], []))
        if batch is not None:
            sent, bumps = sent + batch.sent, bumps + batch.bumps
        try:
            if batch is not None and batch.samples:
                self.store.save_samples_many(batch.samples, self.fence())
            self.store.record_signals(sent)
            sent = []
            self.store.count_many(bumps)
        except BaseException:
            self._unsaved[node] = (sent, bumps)
            raise

    def commit(self, node: str) -> None:
        """The node's decided steps so far: their audit records fsync'd together, their
        states committed together (fenced by the lease), then each carried out in turn."""
        self.carry_out(self.record(node))

    def record(self, node: str) -> Committed | None:
        """The node's decided steps so far, recorded and committed, not yet carried out
        (None: nothing to carry out). Called in the reconciler's turn only: the commit is
        where the rate limits' count of SIGTERMs changes."""
        batch = self._open.get(node)
        if batch is None or not batch.decided:
            return None
        steps, batch.decided = batch.decided, []
        try:
            self.audit.write_many([b.record for b in steps])
        except AuditError as exc:
            log.error("cases %s: not acting, %s", [b.step.case.id for b in steps], exc)
            return None
        try:
            made = self.store.transition_many([b.move for b in steps], self.fence())
        except LeaseLost as exc:
            for b in steps:
                self.aborted(b.step.case, b.record.decision_id, str(exc))
            raise
        finally:  # counted made or not: a commit that failed may have landed
            self.limited_made += sum(b.step.decision.action == LIMITED.action for b in steps)
        # Signals first: a KILL's escalation never waits on another case's notice.
        ordered = sorted(
            zip(steps, made, strict=True),
            key=lambda item: not commits_alone(item[0].step.decision.action),
        )
        return Committed(batch, ordered)

    def in_turn(self, committed: Committed | None) -> Committed | None:
        """Called in the reconciler's turn: carries out a committed batch that needs the
        turn (Committed.needs_turn; a signal leaves in the turn of its commit, right after
        it) and returns None; else returns the batch, to be carried out after the turn."""
        if committed is not None and committed.needs_turn:
            self.carry_out(committed)
            return None
        return committed

    def carry_out(self, committed: Committed | None) -> None:
        """Each committed step's side effect, the node's rehearsals in one round trip."""
        if committed is None:
            return
        batch = committed.batch
        failed: BaseException | None = None
        rehearsals: list[Rehearsed] = []  # the node's, sent together after the loop
        for b, made in committed.steps:
            case, d = b.step.case, b.step.decision
            if not made:
                self.aborted(case, b.record.decision_id, "the case changed meanwhile (snoozed?)")
                continue
            log.info("case %d: %s -> %s (%s)", case.id, b.previous, d.state, d.reason)
            if takes_tree(d.action):
                batch.signalled.add(case)  # before its signal: the pass's next decisions
            try:
                batch.done(case, self.executor.carry_out(b.step, rehearsals))
                if d.state == State.RECLAIMED:
                    self.planner.reclaimed(case, b.mono)
            except (StoreUnavailable, LeaseLost) as exc:
                failed = failed or exc  # the batch's other committed steps are still carried out
            except Exception as exc:  # one broken case never blocks the others
                self.step_failed(case, exc)
        self._rehearse(rehearsals)
        if failed is not None:
            raise failed

    def _rehearse(self, rehearsals: list[Rehearsed]) -> None:
        """The node's rehearsed signals in one round trip (dry runs: each tree verified as
        for a real signal, nothing sent); a failed call fails each of their steps."""
        if not rehearsals:
            return
        try:
            rehearsals[0].step.node.rehearse_many([r.rehearsal for r in rehearsals])
        except Exception as exc:
            for r in rehearsals:
                self.step_failed(r.step.case, exc)

    def aborted(self, case: Case, decision_id: str, why: str) -> None:
        """The audit must not show a decision that was not carried out as if it was."""
        log.info("case %d: decision %s not carried out: %s", case.id, decision_id, why)
        with contextlib.suppress(AuditError):
            self.audit.write(DecisionAborted(case=case.id, decision_id=decision_id, reason=why))
