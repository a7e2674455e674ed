"""The reconciler: turns recorded alerts into cases and advances them, one step at a time.

Every gunicorn worker runs one in a background thread; only the holder of the SQLite lease
acts. Each step is: re-check live state -> pure decision -> audit record (fsync'd) ->
compare-and-set the state, fenced by the lease (renewed in the same transaction) -> the side
effect. The decisions of a node's pass are recorded and committed together (one fsync, one
commit) before any of their side effects; a SIGTERM decision first has the node's earlier
decisions carried out, then looks at its process once more and is committed alone, so its
signal leaves as soon after its last look as before; a SIGKILL commits its batch at once.
A step whose audit record cannot be written stops there; a reconciler that lost its lease
stops before the next side effect and audits the decision as aborted; a state is committed
before its signal is sent, so a restart never signals twice (at worst a SIGTERM is lost
and SIGKILL follows after `term_timeout`). Every episode and every case is handled
in isolation: one that fails is recorded and never blocks the others.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from actuator.audit import AuditError, AuditLog, Event
from actuator.clock import boottime
from actuator.config import ActuatorConfig
from actuator.decision_alerts import DecisionAlerts
from actuator.decision_record import decision_record
from actuator.decisions import (
    Action,
    Decision,
    FleetState,
    decide_live,
    decide_signalled,
    decide_unreachable,
    last_look,
    not_twice,
    wait,
)
from actuator.demand.fit import Choice
from actuator.demand.planner import DemandPlanner
from actuator.demand.reader import DemandReader
from actuator.evidence.pictures import EvidencePictures
from actuator.executor import Executor, Step
from actuator.fleet.directory import NodeDirectory
from actuator.intake import Intake
from actuator.keeplinks import KeepLinks
from actuator.models import (
    SIGNALLED_STATES,
    Case,
    CaseUpdate,
    LiveState,
    Member,
    State,
    Target,
)
from actuator.node import Node, NodeUnreachable
from actuator.notice import ProvenFacts, disagreements
from actuator.notify import Notifier
from actuator.policy import Claims, Effective, Facts, resolve
from actuator.recheck import Checked, demand_key, recheck_due
from actuator.repeat import with_repeat
from actuator.schedulers import Scheduler, Schedulers, gate
from actuator.schedulers.kube_policies import NamespacePolicies, PolicyWatch, start_watch
from actuator.signalled import SignalledTrees
from actuator.startup import idle_thresholds
from actuator.store import Fence, LeaseLost, Store, StoreUnavailable, Transition
from exporter import procfs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Signalled:
    """What the node says of a signalled case: members still alive, and (once none is) the
    GPU's process list, or None when unknown."""

    alive: list[Member]
    listed: dict[int, int] | None


Observation = LiveState | Signalled


@dataclass(frozen=True)
class Decided:
    """A decision in the node's batch, to be recorded and committed with it (`_commit`)."""

    step: Step
    previous: State
    record: dict[str, Any]  # its audit record
    move: Transition  # its state's compare-and-set
    mono: float


PRUNE_EVERY = 600.0  # seconds between retention passes


class Reconciler:
    def __init__(
        self,
        config: ActuatorConfig,
        store: Store,
        audit: AuditLog,
        nodes: Mapping[str, Node] | NodeDirectory,
        notifier: Notifier,
        *,
        clock: Callable[[], float] = time.time,
        mono: Callable[[], float] = boottime,
        holder: str | None = None,
        links: KeepLinks | None = None,
        pictures: EvidencePictures | None = None,
        alerts: DecisionAlerts | None = None,
        schedulers: Schedulers | None = None,
        demand: DemandReader | None = None,
    ) -> None:
        self.config = config
        self.demand = demand  # reclaim_when: demand (built by actuator/server.py)
        self._choices: dict[int, Choice] = {}  # this pass's demand plan, by case id
        self._checked: dict[int, Checked] = {}  # last live re-check of each live case
        self._signalled: dict[str, SignalledTrees] = {}  # by node: this pass's (signalled.py)
        self._repeat_counts: dict[str, int] = {}  # owner -> reclaims in the repeat window
        self.links = links
        self.alerts = alerts
        self.store = store
        self.audit = audit
        self.nodes = nodes if isinstance(nodes, NodeDirectory) else NodeDirectory(nodes)
        self.planner = DemandPlanner(
            demand,
            config.demand,
            store=store,
            audit=audit,
            node=self.nodes.get,
            clock=clock,
            mono=mono,
            alerts=alerts,
        )
        self.notifier = notifier
        self.clock = clock
        self.mono = mono
        self.boot_id = procfs.boot_id()
        self._pruned_at = float("-inf")
        self._renewed_mono = float("-inf")  # when this reconciler last renewed its lease
        self._pass_began: float | None = None  # while a pass runs: when it began (mono)
        self._samples: dict[str, list[Case]] = {}  # by node: cases that only waited (apply)
        self._decided: dict[str, list[Decided]] = {}  # by node: this pass's batch (_commit)
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.holding = False
        self.thresholds = idle_thresholds(config)
        self.intake = Intake(
            config,
            store,
            audit,
            self.nodes,
            clock=clock,
            mono=mono,
            pid_max=procfs.pid_max(),
            fence=self.fence,
            step_failed=self._step_failed,
        )
        self._acting = threading.Lock()
        # Built by the composition root (actuator/server.py); none in a bare reconciler.
        found = schedulers or Schedulers()
        self.schedulers: list[Scheduler] = list(found.schedulers)
        self.namespaces: NamespacePolicies | None = found.namespaces  # GpuReclaimPolicy objects
        self.policy_watch: PolicyWatch | None = None
        self.kube = found.kube
        self._pool: ThreadPoolExecutor | None = None
        self.executor = Executor(
            store=store,
            audit=audit,
            notifier=notifier,
            gate=config.notice,
            clock=clock,
            mono=mono,
            alerts=alerts,
            links=links,
            pictures=pictures,
            thresholds=(
                ("max_sm_util", self.thresholds.max_sm_util),
                ("log_quiet_for", config.idle.log_quiet_for),
            ),
        )

    # -- loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        interval = self.config.reconciler.interval
        threading.Thread(
            target=self.keep_lease, args=(stop,), name="lease-keeper", daemon=True
        ).start()
        if self.demand is not None:  # sources are read apart: a slow one never stalls a pass
            self.demand.start(stop)
        if self.namespaces is not None and self.kube is not None:
            self.policy_watch = start_watch(
                self.kube.api_client, self.namespaces.objects, stop, cluster_mode=self.config.mode
            )
        while not stop.is_set():
            tracking = False
            try:
                self.holding = self.tick()
                tracking = self.holding
            except StoreUnavailable as exc:
                self.holding = False
                log.error("reconciler: %s", exc)
            except Exception:
                log.exception("reconciler tick failed")
            if tracking and not stop.is_set():
                self.nodes.wait_exit(interval)  # wakes early when a signalled process exits
            else:
                stop.wait(interval)
        self._flush_audit()
        if self.holding:
            with contextlib.suppress(StoreUnavailable):
                self.store.release_lease(self.holder)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

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

    def fence(self) -> Fence:
        return Fence(self.holder, self.mono(), self.config.reconciler.lease_ttl)

    def tick(self) -> bool:
        """One pass if we hold the lease; False when another worker holds it."""
        ttl = self.config.reconciler.lease_ttl
        # The end of the last pass renewed the lease with its progress mark: a pass that
        # starts within a third of the lease's life needs no renewal of its own (every
        # acting write renews it again under its fence, actuator/store/lease.py).
        fresh = self.mono() - self._renewed_mono < ttl / 3
        if not fresh and not self.store.acquire_lease(self.holder, self.mono(), ttl):
            return False
        self._pass_began = self.mono()
        try:
            return self._pass(ttl)
        finally:
            self._pass_began = None

    def _pass(self, ttl: float) -> bool:
        try:
            self._repeat_counts = {}  # recounted each tick
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
        now = self.mono()
        if not self.store.mark_progress(self.holder, now, ttl):
            self._renewed_mono = float("-inf")
            return False  # lost meanwhile: the next tick asks for the lease again
        self._renewed_mono = now
        return True

    def _save_samples(self, node: str) -> None:
        """The samples of a node's cases that only waited this pass, and the outcomes of
        its notices, in one commit (a node group's, so a slow node never holds another's
        back)."""
        with self._acting:
            waiting = self._samples.pop(node, []) + self.executor.notified(node)
        if waiting:
            self.store.save_samples_many(waiting, self.fence())

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
        """One node's cases in turn, their decisions committed together (`_commit`); the
        samples of those that only waited, and what was done, saved at once."""
        every, mono = self.config.reconciler.recheck_waiting, self.mono()
        window = self.config.idle.cpu_window
        node = cases[0].node if cases else ""
        self._signalled[node] = SignalledTrees(self.store.signalled_trees)
        try:
            for case in cases:
                try:
                    choice = self._choices.get(case.id)
                    last = self._checked.get(case.id)
                    if not recheck_due(case, last, choice, mono, every, window):
                        continue  # waiting out its grace, re-checked not long ago (recheck.py)
                    self.advance(case)
                except (StoreUnavailable, LeaseLost):
                    raise
                except Exception as exc:  # one broken case never blocks the others
                    self._step_failed(case, exc)
            with self._acting:
                self._commit(node)
        finally:
            self._decided.pop(node, None)  # not committed: neither recorded nor carried out
            self._signalled.pop(node, None)  # read afresh by the node's next pass
            try:
                if cases:
                    self._save_samples(node)
                    self.executor.save_done(node)
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
        removed = self.store.prune(self.clock() - self.config.storage.retention)
        if removed:
            log.info(
                "pruned %d ended case(s) older than %gs", removed, self.config.storage.retention
            )

    def _step_failed(self, case: Case, exc: Exception) -> None:
        log.exception("case %d: step failed; will retry", case.id)
        with contextlib.suppress(StoreUnavailable):
            self.store.count("step_errors")
        with contextlib.suppress(AuditError):
            self.audit.write(
                {
                    "event": Event.STEP_ERROR,
                    "case": case.id,
                    "state": str(case.state),
                    "error": f"{type(exc).__name__}: {exc}"[:500],
                }
            )

    # -- one step of one case -------------------------------------------------------------

    def advance(self, case: Case) -> None:
        """One step of one case: observe the node (outside the lock, so several nodes are
        observed at once), then decide under the lock and add the decision to the node's
        batch (limits are counted and decisions committed and carried out by one step at a
        time, as if steps ran in turn; a SIGTERM's batch is committed at once)."""
        node = self.nodes.get(case.node)
        if node is None:
            return
        seen = self._observe(case, node)
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
                eff = (
                    Effective.model_validate(case.effective) if case.effective else self._eff(case)
                )
            else:
                decision, live, eff = self._decide(case, seen, now, mono)
            # The scheduler, once per step: the live process's, or the one that took the case.
            scheduler = self._scheduler_for(live) if live is not None else self._owner_of(case)
            if scheduler is not None and live is not None:
                decision = gate(scheduler, case, live, decision)
            if decision.action == Action.TERM and live is not None:
                # The node's decisions so far are carried out first (their notices may take
                # seconds): only this one's record and commit come between the look and
                # the signal.
                self._commit(case.node)
                # The re-check was read before this step waited its turn: look again.
                again = self._observe(case, node)
                veto = (
                    last_look(case, live, again, self.config.idle, now, self.thresholds)
                    if isinstance(again, LiveState)
                    else wait()
                )
                if veto is not None:
                    decision = veto
            if decision.action == Action.TERM and live is not None:
                tree = [(case.pid, case.start_ticks)]
                tree += [(m.pid, m.start_ticks) for m in live.members]
                decision = not_twice(decision, tree, self._signalled_on(case).others(case, tree))
            if not isinstance(seen, NodeUnreachable) and case.unreachable_since_mono is not None:
                decision = replace(
                    decision, updates=CaseUpdate(unreachable_since_mono=None).then(decision.updates)
                )
            self.apply(case, decision, live, eff, node, now, mono, scheduler)

    def _signalled_on(self, case: Case) -> SignalledTrees:
        found = self._signalled.get(case.node)
        if found is None:  # a step outside a node's pass: read afresh
            found = SignalledTrees(self.store.signalled_trees)
        return found

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
        self, case: Case, seen: Observation, now: float, mono: float
    ) -> tuple[Decision, LiveState | None, Effective]:
        if isinstance(seen, Signalled):
            eff = self._recorded_eff(case)
            return decide_signalled(case, seen.alive, seen.listed, eff, now, mono=mono), None, eff
        eff = self._eff(case, seen)
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
            self._guard(case, mono),
            now,
            self.thresholds,
            mono=mono,
            notice=self.config.notice,
        )
        return decision, seen, eff

    def _recorded_eff(self, case: Case) -> Effective:
        """The policy recorded when the case was signalled (without a live state to judge)."""
        return Effective.model_validate(case.effective) if case.effective else self._eff(case)

    def rule_for_process(self, pid: int) -> Effective | None:
        """The rule this node's facts select for a local process that has no case yet (a
        keep asked in advance is bounded by it); None when the process cannot be read."""
        name = self.config.node.name
        node = self.nodes.get(name)
        ticks = procfs.start_ticks(pid)
        if node is None or ticks is None:
            return None
        try:
            live = node.inspect(Target(name, pid, ticks, self.boot_id, "", 0.0))
        except Exception:
            log.warning("cannot read process %d for its rule", pid, exc_info=True)
            return None
        if not live.exists or live.start_ticks != ticks or live.user is None:
            return None
        return self._rule(name, None, {}, live)

    def _eff(self, case: Case, live: LiveState | None = None) -> Effective:
        """The policy rule from what the node sees; the alert's labels only make it safer."""
        return self._rule(case.node, case.user, case.labels, live)

    def _rule(
        self, node: str, user: str | None, labels: dict[str, str], live: LiveState | None
    ) -> Effective:
        said: dict[str, str] = {}
        for scheduler in self.schedulers if live is not None else ():
            said.update(scheduler.facts(live))  # type: ignore[arg-type]
        facts = Facts(
            user=live.user if live and live.user else user,
            groups=live.groups if live else (),
            namespace=live.namespace if live else "",
            project=live.project if live else "",
            node=node if live and live.exists else "",
            **said,
        )
        claims = Claims(project=labels.get("project", ""), namespace=labels.get("namespace", ""))
        policy = self.namespaces.policy(self.config) if self.namespaces else self.config
        eff = resolve(policy, facts, claims)
        if self.config.repeat is None or not facts.user:
            return eff
        return with_repeat(eff, self._reclaims_of(facts.user), self.config.repeat)

    def _reclaims_of(self, user: str) -> int:
        """The owner's reclaims within the repeat window (counted once per tick)."""
        assert self.config.repeat is not None
        known = self._repeat_counts.get(user)
        if known is None:
            since = self.clock() - self.config.repeat.window
            known = self._repeat_counts[user] = self.store.reclaims_since(user, since)
        return known

    def _guard(self, case: Case, mono: float) -> FleetState:
        return FleetState(
            unresolved=self.store.unresolved_episodes(case.id),
            breaker_open=self.store.breaker()[0],
            terminations_node_hour=self.store.terminations_since(
                mono - 3600, self.store.clock_id, case.node
            ),
            terminations_minute=self.store.terminations_since(mono - 60, self.store.clock_id),
            kept_until=self._kept_until(case),
            demand=self._choices.get(case.id),
        )

    def _kept_until(self, case: Case) -> float | None:
        """A keep the owner asked before this case opened (for this very process)."""
        if case.state != State.PENDING:
            return None
        kept = self.store.active_keep(
            case.node, case.pid, case.start_ticks, case.boot_id, self.clock()
        )
        return kept.until if kept else None

    def apply(
        self,
        case: Case,
        d: Decision,
        live: LiveState | None,
        eff: Effective,
        node: Node,
        now: float,
        mono: float,
        scheduler: Scheduler | None = None,
    ) -> None:
        """The decision's case updates; a state change goes into the node's batch, recorded
        and committed with it before the executor carries it out (`_commit`)."""
        d.updates.apply_to(case)
        if not d.changes_state:
            if d.updates:  # evidence for later steps, covering no side effect
                self._samples.setdefault(case.node, []).append(case)  # _save_samples
            return
        assert d.state is not None
        if live is not None and live.user:
            case.user = live.user
        disagree: dict[str, dict[str, str]] = {}
        if (
            live is not None
            and live.exists
            and (live.start_ticks, live.boot_id) == (case.start_ticks, case.boot_id)
        ):  # this very process: another one under the PID proves nothing about ours
            # What people will read is what the node proved now (never the alert's claims).
            facts = ProvenFacts.from_live(case, live)
            case.facts, case.project = facts.to_json(), facts.project or None
            disagree = disagreements(case.labels, facts)
        case.rule, case.mode, case.effective = eff.rule, str(eff.mode), eff.model_dump()
        if d.action == Action.TERM:
            assert live is not None
            case.term_at, case.term_mono = now, mono
            case.members = list(live.members)
            case.gpu_memory_bytes = live.gpu_memory_bytes
            if scheduler is not None:
                scheduler.claim(case, live)
        elif d.action == Action.KILL:
            case.kill_at, case.kill_mono = now, mono
        previous = case.state
        record = decision_record(case, previous, d.action, d.reason, now, {"code": d.code})
        record["to"] = str(d.state)
        if live is not None:
            record["live"] = live.evidence()
        record["thresholds"] = self._thresholds(eff)
        if disagree:  # the alert claimed otherwise; the node won
            record["alert_disagrees"] = disagree
        evidence = {"action": str(d.action), "code": d.code, "decision_id": record["decision_id"]}
        if live is not None:
            evidence["live"] = live.evidence()
            evidence["thresholds"] = record["thresholds"]  # what `why` judges it against
        move = Transition(case, d.state, d.reason, evidence, now, d.code or "", mono)
        step = Step(case, d, live, eff, node, scheduler, now)
        self._decided.setdefault(case.node, []).append(Decided(step, previous, record, move, mono))
        if d.action in (Action.TERM, Action.KILL):
            self._commit(case.node)  # a signal leaves right after its decision, as ever

    def _commit(self, node: str) -> None:
        """The node's decided steps so far: their audit records fsync'd together, their
        states committed together (fenced by the lease), then each carried out in turn.
        Nothing is carried out that is not both recorded and committed."""
        batch = self._decided.pop(node, [])
        if not batch:
            return
        try:
            self.audit.write_many([b.record for b in batch])
        except AuditError as exc:
            log.error("cases %s: not acting, %s", [b.step.case.id for b in batch], exc)
            return
        try:
            made = self.store.transition_many([b.move for b in batch], self.fence())
        except LeaseLost as exc:
            for b in batch:
                self._aborted(b.step.case, b.record["decision_id"], str(exc))
            raise
        failed: BaseException | None = None
        # Signals first: a KILL's escalation never waits on another case's notice.
        steps = sorted(
            zip(batch, made, strict=True),
            key=lambda item: item[0].step.decision.action not in (Action.TERM, Action.KILL),
        )
        for b, done in steps:
            case, d = b.step.case, b.step.decision
            if not done:
                self._aborted(
                    case, b.record["decision_id"], "the case changed meanwhile (snoozed?)"
                )
                continue
            log.info("case %d: %s -> %s (%s)", case.id, b.previous, d.state, d.reason)
            if d.action == Action.TERM:
                self._signalled_on(case).add(case)  # before its signal: the pass's next decisions
            try:
                self.executor.carry_out(b.step)
                if d.state == State.RECLAIMED:
                    self.planner.reclaimed(case, b.mono)
            except (StoreUnavailable, LeaseLost) as exc:
                failed = failed or exc  # the batch's other committed steps are still carried out
            except Exception as exc:  # one broken case never blocks the others
                self._step_failed(case, exc)
        if failed is not None:
            raise failed

    def _aborted(self, case: Case, decision_id: str, why: str) -> None:
        """The audit must not show a decision that was not carried out as if it was."""
        log.info("case %d: decision %s not carried out: %s", case.id, decision_id, why)
        with contextlib.suppress(AuditError):
            self.audit.write(
                {
                    "event": Event.DECISION_ABORTED,
                    "case": case.id,
                    "decision_id": decision_id,
                    "reason": why,
                }
            )

    # -- records ------------------------------------------------------------------------

    def _thresholds(self, eff: Effective) -> dict[str, Any]:
        idle = self.config.idle
        return {
            "max_sm_util": self.thresholds.max_sm_util,
            "max_cpu_cores": self.thresholds.max_cpu_cores,
            "max_memory_growth_bytes": self.thresholds.max_memory_growth_bytes,
            "cpu_window": idle.cpu_window,
            "log_quiet_for": idle.log_quiet_for,
            **eff.model_dump(),
        }
