"""Intake: recorded alerts become cases, and cases that ended while their alert still fires
start again (re-arm). Apart from the reconciler's step, which takes the cases from here.

Ingest turns new episodes into cases in batches (one audit fsync and one transaction each):
a label names the process and the rule, nothing else; an alert that cannot be parsed, or
names a node without an agent, is a refused case (a poison episode is refused, never
retried for ever); an alert for a process that already has a live case joins it. After a
batch, the circuit breaker is checked once per node that got a new case. Re-arm builds the
new case from an allow-list of what it keeps (actuator/rearm.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from actuator.audit import AuditError, AuditLog
from actuator.audit_records import BreakerOpened
from actuator.config import ActuatorConfig
from actuator.decision_record import decision_record
from actuator.decisions import REARM_LOOKBACK, breaker_should_open, rearm_wait
from actuator.fleet.directory import NodeDirectory
from actuator.models import Case, Reason, State, Target, parse_target, parse_uid_label
from actuator.rearm import rearmed_case
from actuator.store import Episode, Fence, LeaseLost, Store, StoreUnavailable
from actuator.store.cases import TargetKey

INGEST_CHUNK = 50  # new cases (and processed episodes) per transaction

log = logging.getLogger(__name__)


class Intake:
    def __init__(
        self,
        config: ActuatorConfig,
        store: Store,
        audit: AuditLog,
        nodes: NodeDirectory,
        *,
        clock: Callable[[], float],
        mono: Callable[[], float],
        pid_max: int,
        fence: Callable[[], Fence],
        step_failed: Callable[[Case, Exception], None],
    ) -> None:
        self.config, self.store, self.audit, self.nodes = config, store, audit, nodes
        self.clock, self.mono, self.pid_max = clock, mono, pid_max
        self.fence, self.step_failed = fence, step_failed

    # -- episodes -> cases ----------------------------------------------------------------

    def ingest(self, batch: int = 500) -> None:
        """New episodes -> cases, in batches: one audit fsync and one transaction each."""
        now = self.clock()
        marks: list[tuple[Episode, int | None]] = []
        new: list[tuple[Case, Episode]] = []
        targets: set[TargetKey] = set()
        parsed = [
            (ep, parse_target(ep.labels, ep.annotations, pid_max=self.pid_max))
            for ep in self.store.pending_episodes(batch)
        ]
        # The live cases of the batch's targets' nodes, read once: an alert for one joins
        # it. The node as the target names it (a label, else an annotation).
        live = self.store.live_case_ids_on({t.node for _, t in parsed if isinstance(t, Target)})
        for ep, target in parsed:
            if ep.case_id is not None or ep.status == "resolved":
                marks.append((ep, None))  # resolution is seen by the case's own step
                continue
            if ep.ends_ts is not None and ep.ends_ts <= now:
                log.info("ignoring stale alert %s (ended at %s)", ep.fingerprint, ep.ends_ts)
                marks.append((ep, None))
                continue
            try:
                case, existing = self._new_case(ep, target, now, live)
            except (StoreUnavailable, LeaseLost):
                raise
            except Exception as exc:  # a poison episode is refused, never retried forever
                log.exception("episode %s could not be processed", ep.fingerprint)
                case, existing = self._unprocessable(ep, now, exc), None
            if existing is not None:
                marks.append((ep, existing))  # one escalation per target
                continue
            assert case is not None
            key = case.target.key
            if case.state == State.PENDING and key in targets:
                continue  # same target twice in this batch: link it on the next pass
            targets.add(key)
            new.append((case, ep))
        if not marks and not new:
            return

        def audit_created(cases: list[Case]) -> None:
            # Inside the store's transaction, once the ids exist: no case without its
            # record, and the record names the case.
            self.audit.write_many(
                [decision_record(c, None, "created", c.reason, now) for c in cases]
            )

        made: list[Case] = []
        # A few dozen cases a transaction: the store's writer lock (and the audit's fsync
        # inside it) is held for milliseconds, so the webhook's commits are not queued
        # behind a batch's hundreds of cases.
        for at in range(0, max(len(marks), len(new)), INGEST_CHUNK):
            chunk = new[at : at + INGEST_CHUNK]
            try:
                self.store.ingest_batch(
                    marks[at : at + INGEST_CHUNK], chunk, before_commit=audit_created
                )
            except AuditError as exc:
                log.error("not creating cases: %s", exc)
                break
            made += [case for case, _ in chunk]
        checked: set[str] = set()
        for case in made:
            if case.state == State.PENDING and case.node not in checked:
                checked.add(case.node)
                self._check_breaker(case, now)

    def _unprocessable(self, ep: Episode, now: float, exc: Exception) -> Case:
        case = self._blank_case(ep, now)
        case.state, case.reason_code = State.REFUSED, Reason.BAD_TARGET
        case.reason = f"the alert could not be processed: {type(exc).__name__}: {exc}"[:500]
        case.ended_at, case.ended_mono = now, self.mono()
        return case

    def _blank_case(self, ep: Episode, now: float) -> Case:
        uid = parse_uid_label(ep.labels.get("uid"))
        return Case(
            id=0,
            state=State.PENDING,
            version=0,
            node=ep.labels.get("node", ""),
            pid=0,
            start_time=0.0,
            uuid=ep.labels.get("uuid", ""),
            start_ticks=0,
            boot_id="",
            alertname=ep.alertname,
            fingerprint=ep.fingerprint,
            starts_ts=ep.starts_ts,
            labels=ep.labels,
            annotations=ep.annotations,
            created=now,
            updated=now,
            reason="alert received",
            uid=uid if isinstance(uid, int) else None,
            mode=str(self.config.mode),
            created_mono=self.mono(),
            clock=self.store.clock_id,
        )

    def _new_case(
        self, ep: Episode, target: Target | str, now: float, live: dict[TargetKey, int]
    ) -> tuple[Case | None, int | None]:
        """A new case for the episode's target (parse_target's, or why it names none), or
        the id of the live case it belongs to (`live`: the live cases of the batch's nodes
        by target, read before the batch)."""
        uid = parse_uid_label(ep.labels.get("uid"))
        case = self._blank_case(ep, now)
        problem = target if isinstance(target, str) else uid if isinstance(uid, str) else None
        if problem is not None or isinstance(target, str):
            case.state, case.reason = State.REFUSED, str(problem)
            case.reason_code = Reason.BAD_TARGET
            case.ended_at, case.ended_mono = now, case.created_mono
            return case, None
        # The alert's start_time is a claim: the case's start time is the node's, written by
        # the first re-check (boot time plus start ticks); 0 until then.
        case.node, case.pid, case.uuid = target.node, target.pid, target.uuid
        case.start_ticks, case.boot_id = target.start_ticks, target.boot_id
        if target.node not in self.nodes:
            case.state, case.reason_code = State.REFUSED, Reason.UNKNOWN_NODE
            case.reason = f"no agent for node {target.node!r}"
            case.ended_at, case.ended_mono = now, case.created_mono
            return case, None
        return (None, live[target.key]) if target.key in live else (case, None)

    def _check_breaker(self, case: Case, now: float) -> None:
        breaker = self.config.breaker
        is_open, _, _ = self.store.breaker()
        if is_open:
            return
        flagged = self.store.flagged_since(self.mono() - breaker.window, case.node)
        if flagged < breaker.min_flagged:
            return  # too few to open it whatever the node monitors: no call to its agent
        monitored = self.nodes[case.node].monitored_count()
        reason = breaker_should_open(flagged, monitored, breaker)
        if reason is None:
            return
        try:
            self.audit.write(BreakerOpened(node=case.node, reason=reason))
        except AuditError as exc:
            log.error("breaker: %s", exc)
        if self.store.set_breaker(True, now, reason):
            log.error("circuit breaker OPEN: %s", reason)

    # -- ended cases whose alert still fires ----------------------------------------------

    def rearm(self) -> None:
        """Cases cancelled for activity, or refused because evidence was unknown, while their
        alert keeps firing start again once the window has passed since they ended (the new
        case re-checks everything; unknown is still never idle, it is only asked again, less
        often each time it stays unknown)."""
        window = self.config.idle.rearm_after
        mono = self.mono()
        for old in self.store.rearm_candidates(mono - window):
            in_a_row = self.store.unknown_in_a_row(old, most=REARM_LOOKBACK)
            wait = rearm_wait(window, in_a_row)
            if old.ended_mono is None or old.ended_mono > mono - wait:
                continue
            try:
                self._rearm(old, wait)
            except (StoreUnavailable, LeaseLost):
                raise
            except Exception as exc:
                self.step_failed(old, exc)

    def _rearm(self, old: Case, window: float) -> None:
        now = self.clock()
        new = rearmed_case(old, now=now, mono=self.mono(), clock=self.store.clock_id, window=window)

        def audit_rearmed(case: Case) -> None:
            self.audit.write(
                decision_record(case, None, "rearmed", case.reason, now, rearmed_from=old.id)
            )

        try:
            rearmed = self.store.rearm(old, new, self.fence(), before_commit=audit_rearmed)
        except AuditError as exc:
            log.error("not re-arming case %d: %s", old.id, exc)
            return
        if rearmed:
            log.info("case %d re-armed as case %d", old.id, new.id)
