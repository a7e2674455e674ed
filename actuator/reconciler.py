"""The reconciler: turns recorded alerts into cases and advances them, one step at a time.

Every gunicorn worker runs one in a background thread; only the holder of the SQLite lease
acts. Each step is: re-check live state -> pure decision -> audit record (fsync'd) ->
compare-and-set the state, fenced by the lease (renewed in the same transaction) -> the side
effect. The decisions of a node's pass are recorded and committed together (one fsync, one
commit) before any of their side effects; a SIGTERM decision first has the node's earlier
decisions carried out, then looks at its process once more and is committed alone, so its
signal leaves as soon after its last look as before; a SIGKILL commits its batch at once.
Steps decide one at a time (the turn: the rate limits count every SIGTERM decided
before); a node's notices, observations, checkpoints and restores are carried out after
its batch's commit has left the turn, so a slow mail server or a checkpoint's copy holds its
own node's pass, not every node's.
A step whose audit record cannot be written stops there; a reconciler that lost its lease
stops before the next side effect and audits the decision as aborted; a state is committed
before its signal is sent, so a restart never signals twice (at worst a SIGTERM is lost
and SIGKILL follows after `term_timeout`). Every episode and every case is handled
in isolation: one that fails is recorded and never blocks the others.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from actuator.audit import AuditError, AuditLog
from actuator.audit_records import StepError
from actuator.config import ActuatorConfig
from actuator.decision_alerts import DecisionAlerts
from actuator.decisions import (
    Decision,
    decide_live,
    decide_signalled,
    decide_unreachable,
    last_look,
    not_twice,
    wait,
)
from actuator.demand.fit import Choice
from actuator.demand.planner import DemandPlanner
from actuator.executor import Step
from actuator.fleet.directory import NodeDirectory
from actuator.guard_reader import GuardRead, GuardReader
from actuator.intake import Intake
from actuator.intake_first import DeliveryClock, wait_for_intake
from actuator.ladder import SIGNALLED_STATES, commits_alone, last_look_before, takes_tree
from actuator.models import (
    Case,
    CaseUpdate,
    LiveState,
    Member,
    State,
)
from actuator.node import Node, NodeUnreachable
from actuator.node_batch import Committed, Decided, NodeBatches, decided, state_change
from actuator.policy import Effective
from actuator.recheck import Checked, demand_key, recheck_due
from actuator.rulebook import RuleBook
from actuator.schedulers import Scheduler, gate
from actuator.store import LeaseLost, Store, StoreUnavailable, Transition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Signalled:
    """What the node says of a signalled case: members still alive, and (once none is) the
    GPU's process list, or None when unknown."""

    alive: list[Member]
    listed: dict[int, int] | None


Observation = LiveState | Signalled

PRUNE_EVERY = 600.0  # seconds between retention passes
# A re-check read in its node's batch stands in for the case's own this long; older (the
# node's earlier cases took their time), the case is re-checked alone.
BATCHED_FRESH_FOR = 2.0


@dataclass(frozen=True)
class Batched:
    """A case's re-check from its node's one inspect-many call, and when it was asked."""

    live: LiveState
    asked_mono: float


def step_failed(store: Store, audit: AuditLog, case: Case, exc: Exception) -> None:
    """A step that raised: logged, counted and audited; the case is tried again."""
    log.exception("case %d: step failed; will retry", case.id)
    with contextlib.suppress(StoreUnavailable):
        store.count("step_errors")
    with contextlib.suppress(AuditError):
        error = f"{type(exc).__name__}: {exc}"[:500]
        audit.write(StepError(case=case.id, state=str(case.state), error=error))


class Reconciler:
    """The loop and the composition of one step; its parts are built by the composition
    root (actuator/compose.py)."""

    def __init__(
        self,
        config: ActuatorConfig,
        store: Store,
        audit: AuditLog,
        nodes: NodeDirectory,
        *,
        intake: Intake,
        rules: RuleBook,
        planner: DemandPlanner,
        batches: NodeBatches,
        schedulers: Sequence[Scheduler],
        holder: str,
        clock: Callable[[], float],
        mono: Callable[[], float],
        alerts: DecisionAlerts | None = None,
        deliveries: DeliveryClock | None = None,
    ) -> None:
        self.config, self.store, self.audit, self.nodes = config, store, audit, nodes
        self.deliveries = deliveries  # the host's webhook deliveries (actuator/intake_first.py)
        self.intake, self.rules, self.planner, self.batches = intake, rules, planner, batches
        self.schedulers, self.holder, self.alerts = schedulers, holder, alerts
        self.clock, self.mono = clock, mono
        self.guards = GuardReader(store, lambda: batches.limited_made, clock, mono)
        self.thresholds = rules.thresholds
        self._choices: dict[int, Choice] = {}  # this pass's demand plan, by case id
        self._checked: dict[int, Checked] = {}  # last live re-check of each live case
        self._pruned_at = float("-inf")
        self._renewed_mono = float("-inf")  # when this reconciler last renewed its lease
        self._pass_began: float | None = None  # while a pass runs: when it began (mono)
        self.holding = False
        self._acting = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    # -- loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        interval = self.config.reconciler.interval
        threading.Thread(
            target=self.keep_lease, args=(stop,), name="lease-keeper", daemon=True
        ).start()
        while not stop.is_set():
            tracking = False
            try:
                self.holding = self.tick(stop)
                tracking = self.holding
            except StoreUnavailable as exc:
                self.holding = False
                log.error("reconciler: %s", exc)
            except Exception:
                log.exception("reconciler tick failed")
            if tracking and not stop.is_set():
                self.intake_first(stop)
                self.nodes.wait_exit(interval)  # wakes early when a signalled process exits
            else:
                stop.wait(interval)
        self._flush_audit()
        if self.holding:
            with contextlib.suppress(StoreUnavailable):
                self.store.release_lease(self.holder)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def intake_first(self, stop: threading.Event) -> None:
        """Between passes, while deliveries are arriving on this host: wait for them
        (actuator/intake_first.py), the lease and the progress mark renewed meanwhile."""
        if self.deliveries is not None:
            ttl, most = self.config.reconciler.lease_ttl, self.config.reconciler.intake_first
            wait_for_intake(self.deliveries, most, ttl / 3, stop, lambda: self._progressed(ttl))

    def _progressed(self, ttl: float) -> bool:
        """Say this holder progressed, renewing its lease; False when it is no longer ours
        (the next tick asks for it again)."""
        now = self.mono()
        kept = self.store.mark_progress(self.holder, now, ttl)
        self._renewed_mono = now if kept else float("-inf")
        return kept

    def keep_lease(self, stop: threading.Event, every: float | None = None) -> None:
        """Renew the lease while a pass is running, every third of its life: one step may
        take longer than the lease (a notice waits for its picture and its mail server), and
        another worker taking over meanwhile would repeat what the step is doing (a second
        notice). A pass running past `reconciler.stall_after` is not kept alive: a wedged
        worker still hands the lease over, and its later writes are fenced out."""
        ttl = self.config.reconciler.lease_ttl
        while not stop.wait(ttl / 3 if every is None else every):
            began = self._pass_began
            now = self.mono()
            if began is None or now - began > self.config.reconciler.stall_after:
                continue
            try:
                if self.store.renew_lease(self.holder, now, ttl):
                    self._renewed_mono = now
            except StoreUnavailable:
                pass  # the pass's own writes say so

    def tick(self, stop: threading.Event | None = None) -> bool:
        """One pass if we hold the lease; False when another worker holds it. A new holder
        (a restart, a take-over) with `stop` first lets the deliveries arriving land."""
        ttl = self.config.reconciler.lease_ttl
        # The end of the last pass renewed the lease with its progress mark: a pass that
        # starts within a third of the lease's life needs no renewal of its own (every
        # acting write renews it again under its fence, actuator/store/lease.py).
        fresh = self.mono() - self._renewed_mono < ttl / 3
        if not fresh and not self.store.acquire_lease(self.holder, self.mono(), ttl):
            return False
        if stop is not None and not self.holding:
            self.intake_first(stop)
        self._pass_began = self.mono()
        try:
            return self._pass(ttl)
        finally:
            self._pass_began = None

    def _pass(self, ttl: float) -> bool:
        try:
            self.rules.new_pass()  # the owners' reclaims, recounted
            self.intake.ingest()
            self.intake.rearm()
            cases = self.store.live_cases()
            self._choices = self.planner.plan(cases)
            live_ids = {c.id for c in cases}
            self._checked = {k: v for k, v in self._checked.items() if k in live_ids}
            with self.alerts.batched() if self.alerts is not None else contextlib.nullcontext():
                self._advance_all(cases)  # the pass's decision alerts leave as one list
            self.planner.watch()
        except LeaseLost as exc:
            log.warning("reconciler: %s; stopping this tick", exc)
            self._renewed_mono = float("-inf")
            return False
        if self.alerts is not None:
            is_open, _, why = self.store.breaker()
            self.alerts.breaker(is_open, why, self.mono())
        self._prune()
        return self._progressed(ttl)

    def _advance_all(self, cases: list[Case]) -> None:
        """Every live case, one step each: a node's cases in turn, up to
        `reconciler.parallel` nodes at once (a slow node does not hold the others up)."""
        by_node: dict[str, list[Case]] = {}
        for case in cases:
            by_node.setdefault(case.node, []).append(case)
        if len(by_node) <= 1 or self.config.reconciler.parallel == 1:
            for group in by_node.values():
                self._advance_group(group)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self.config.reconciler.parallel, thread_name_prefix="reconciler-node"
            )
        futures = [self._pool.submit(self._advance_group, g) for g in by_node.values()]
        failures = [f.exception() for f in futures]
        for exc in failures:  # the lease first: a lost lease stops the tick
            if isinstance(exc, LeaseLost):
                raise exc
        for exc in failures:
            if exc is not None:
                raise exc

    def _advance_group(self, cases: list[Case]) -> None:
        """One node's cases in turn, their decisions committed together (node_batch.py); the
        samples of those that only waited, and what was done, saved at once."""
        every, mono = self.config.reconciler.recheck_waiting, self.mono()
        window = self.config.idle.cpu_window
        node = cases[0].node if cases else ""
        self.batches.begin(node)
        try:
            due: list[Case] = []
            for case in cases:
                try:
                    choice = self._choices.get(case.id)
                    last = self._checked.get(case.id)
                    if recheck_due(case, last, choice, mono, every, window):
                        due.append(case)  # else waiting out its grace, re-checked lately
                except Exception as exc:  # one broken case never blocks the others
                    self._step_failed(case, exc)
            batched: dict[int, Batched] | None = {}  # None: each case asks alone
            # Re-checks the batches may ask for: cases that each outlast a batch's freshness
            # are not asked again and again (at most twice what asking alone would).
            budget = 2 * len(due)
            for at, case in enumerate(due):
                try:
                    got = batched.get(case.id) if batched is not None else None
                    stale = got is None or not self._fresh(got)
                    if batched is not None and stale and case.state not in SIGNALLED_STATES:
                        # First, or the node's cases so far took their time: the rest, asked.
                        rest = due[at:]
                        budget -= len(rest)
                        batched = self._inspect_due(node, rest) if budget >= 0 else None
                        got = batched.get(case.id) if batched is not None else None
                    self.advance(case, got)
                except (StoreUnavailable, LeaseLost):
                    raise
                except Exception as exc:  # one broken case never blocks the others
                    self._step_failed(case, exc)
            with self._acting:
                committed = self.batches.in_turn(self.batches.record(node))
            # Its notices, observations and restores after the turn: a slow mail server or
            # agent no longer holds every other node's steps (Committed.needs_turn).
            self.batches.carry_out(committed)
        finally:
            try:
                with self._acting:
                    self.batches.end(node)  # samples and what was done, saved
            finally:
                self._flush_audit()

    def _flush_audit(self) -> None:
        """The node's records of what was done (notices, signals) fsync'd together, once
        per pass; every decision record was fsync'd before its side effect."""
        try:
            self.audit.flush()
        except AuditError as exc:
            log.error("reconciler: %s", exc)

    def _prune(self) -> None:
        """Retention: now and then, forget ended cases older than storage.retention."""
        if self.mono() - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = self.mono()
        retention = self.config.storage.retention
        if removed := self.store.prune(self.clock() - retention):
            log.info("pruned %d ended case(s) older than %gs", removed, retention)

    def _step_failed(self, case: Case, exc: Exception) -> None:
        step_failed(self.store, self.audit, case, exc)

    # -- one step of one case -------------------------------------------------------------

    def _inspect_due(self, name: str, due: list[Case]) -> dict[int, Batched] | None:
        """The re-checks of a node's due cases, in one round trip (a fleet's agent answers
        them together). Not signalled ones only (theirs is another question); nothing for
        a lone case, and None for an unanswered call: each case then asks on its own."""
        node = self.nodes.get(name)
        asking = [c for c in due if c.state not in SIGNALLED_STATES]
        if node is None or len(asking) < 2:
            return {}
        asked = self.mono()
        try:
            lives = node.inspect_many([c.target for c in asking])
        except Exception:
            # Unanswered, or one case's re-check broke: each case asks alone, and only a
            # broken one fails its step.
            return None
        return {c.id: Batched(live, asked) for c, live in zip(asking, lives, strict=True)}

    def _fresh(self, batched: Batched) -> bool:
        return self.mono() - batched.asked_mono <= BATCHED_FRESH_FOR

    def advance(self, case: Case, batched: Batched | None = None) -> None:
        """One step of one case: observe the node (outside the lock, so several nodes are
        observed at once; its node's batched re-check while fresh), then decide under the
        lock and add the decision to the node's batch (limits are counted and decisions
        committed by one step at a time, as if steps ran in turn; a SIGTERM's batch is
        committed at once and carried out in the turn, a checkpoint's after it)."""
        node = self.nodes.get(case.node)
        if node is None:
            return
        fresh = batched is not None and self._fresh(batched)
        seen = batched.live if batched is not None and fresh else self._observe(case, node)
        read = self.guards.read(case) if isinstance(seen, LiveState) else None  # not our turn yet
        with self._acting:
            now, mono = self.clock(), self.mono()
            self._checked[case.id] = Checked(mono, demand_key(self._choices.get(case.id)))
            if isinstance(seen, NodeUnreachable):
                agents = self.config.agents
                decision = decide_unreachable(
                    case,
                    str(seen),
                    mono=mono,
                    wait_for=agents.unreachable_wait if agents else 0.0,
                    give_up=agents.unreachable_give_up if agents else 0.0,
                )
                live = None
                eff = self.rules.recorded(case)
            else:
                decision, live, eff = self._decide(case, seen, read, now, mono)
            # The scheduler, once per step: the live process's, or the one that took the case.
            scheduler = self._scheduler_for(live) if live is not None else self._owner_of(case)
            if scheduler is not None and live is not None:
                decision = gate(scheduler, case, live, decision)
            if last_look_before(decision.action) and live is not None:
                # The node's decisions so far are carried out first (their notices may take
                # seconds): only this one's record and commit come between the look and
                # the signal.
                self.batches.commit(case.node)
                # The re-check was read before this step waited its turn: look again.
                again = self._observe(case, node)
                veto = (
                    last_look(case, live, again, self.config.idle, now, self.thresholds)
                    if isinstance(again, LiveState)
                    else wait()
                )
                if veto is not None:
                    decision = veto
            if takes_tree(decision.action) and live is not None:
                tree = [(case.pid, case.start_ticks)]
                tree += [(m.pid, m.start_ticks) for m in live.members]
                signalled = self.batches.signalled_on(case.node)
                decision = not_twice(decision, tree, signalled.others(case, tree))
            if not isinstance(seen, NodeUnreachable) and case.unreachable_since_mono is not None:
                decision = replace(
                    decision, updates=CaseUpdate(unreachable_since_mono=None).then(decision.updates)
                )
            committed = self._record_step(case, decision, live, eff, node, now, mono, scheduler)
            committed = self.batches.in_turn(committed)  # a signal leaves in it, as ever
        self.batches.carry_out(committed)  # a checkpoint after the turn: its copy takes long

    # -- schedulers (Slurm jobs, Kubernetes pods) -------------------------------------------

    def _scheduler_for(self, live: LiveState) -> Scheduler | None:
        return next((s for s in self.schedulers if s.applies(live)), None)

    def _owner_of(self, case: Case) -> Scheduler | None:
        return next((s for s in self.schedulers if s.owns(case)), None)

    def _observe(self, case: Case, node: Node) -> Observation | NodeUnreachable:
        """What the node says now: the recorded members still alive (and, once none is, the
        GPU's process list) for a signalled case, else the live re-check."""
        try:
            if case.state in SIGNALLED_STATES:
                members = case.members or [Member(case.pid, case.start_ticks, case.uid)]
                alive = node.alive(members)
                return Signalled(alive, None if alive else node.gpu_processes(case.uuid))
            return node.inspect(case.target)
        except NodeUnreachable as exc:
            return exc

    def _decide(
        self, case: Case, seen: Observation, read: GuardRead | None, now: float, mono: float
    ) -> tuple[Decision, LiveState | None, Effective]:
        if isinstance(seen, Signalled):
            eff = self.rules.recorded(case)
            return decide_signalled(case, seen.alive, seen.listed, eff, now, mono=mono), None, eff
        eff = self.rules.for_case(case, seen)
        # Only a pending case reads the owner's allowance: asking a pod's API server on every
        # step of every case would put one API call on each decision's hot path.
        for scheduler in self.schedulers if case.state == State.PENDING else ():
            asked = scheduler.keep_asked(seen) if scheduler.applies(seen) else None
            if asked is not None:
                seen = replace(seen, keep_asked=asked)  # audited with the live evidence
                break
        decision = decide_live(
            case,
            seen,
            eff,
            self.config.idle,
            self.config.limits,
            self.guards.at_turn(case, read, self._choices.get(case.id)),
            now,
            self.thresholds,
            mono=mono,
            notice=self.config.notice,
        )
        return decision, seen, eff

    def _record_step(
        self,
        case: Case,
        d: Decision,
        live: LiveState | None,
        eff: Effective,
        node: Node,
        now: float,
        mono: float,
        scheduler: Scheduler | None = None,
    ) -> Committed | None:
        """The decision's case updates; a state change goes into the node's batch, recorded
        and committed with it before the executor carries it out (actuator/node_batch.py).
        A rung that commits alone (a signal, a checkpoint) commits its node's batch now and
        returns it, for the step to carry out as soon as its turn allows."""
        d.updates.apply_to(case)
        if not d.changes_state:
            if d.updates:  # evidence for later steps, covering no side effect
                self.batches.sample(case)
            return None
        assert d.state is not None
        state_change(case, d, live, eff, scheduler, now, mono).apply_to(case)
        previous = case.state
        record, evidence = decided(case, d, live, previous, self.rules.thresholds_of(eff), now)
        move = Transition(case, d.state, d.reason, evidence, now, d.code or "", mono)
        step = Step(case, d, live, eff, node, scheduler, now)
        self.batches.add(case, Decided(step, previous, record, move, mono))
        if commits_alone(d.action):  # a signal leaves right after its decision, as ever
            return self.batches.record(case.node)
        return None
