"""Carries out a decision the reconciler has committed: one table from action to effect.

The reconciler decides (pure functions in actuator/decisions.py), records the decision and
commits the new state; then `Executor.carry_out` does what the decision means, through
the one function that performs each side effect: the notice, a signal to a process tree,
a scheduler's step (scancel, eviction, deletion), the follow-up, the verification and the
decision alerts. Observe mode passes `dry_run` into whichever of them enforcement would
use, so a pod's rehearsal is its eviction ("DRY-RUN: would evict ..."), a Slurm job's is
its scancel, and a bare process's is its signal. It returns what it did (an `Outcome`, which
the node's batch commits with its samples) and changes no case.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass

from actuator.audit import AuditError, AuditLog
from actuator.audit_records import (
    CheckpointCalled,
    FollowupSent,
    FreedForRequest,
    NoticeSent,
    SignalsSent,
)
from actuator.checkpoint import CheckpointResult
from actuator.decision_alerts import DecisionAlerts
from actuator.decisions import Decision, after_notice
from actuator.evidence.pictures import EvidencePictures
from actuator.keeplinks import KeepLinks
from actuator.ladder import FIRST_SIGNAL, LADDER, Action, Rung, rung_of
from actuator.models import Case, CaseUpdate, LiveState, Reason, State
from actuator.node import Node
from actuator.notifications.notice import Kind, Notice, OwnerHint, ProvenFacts, RestoreNews
from actuator.notifications.notify import NoticeResult, Notifier
from actuator.policy import Effective, ReclaimWhen
from actuator.policy import Notice as NoticeGate
from actuator.rehearsal import Rehearsal
from actuator.schedulers import Scheduler
from actuator.store.counters import Bump, demand_to_free
from actuator.store.signals import SignalSent
from actuator.suspension import RESTORE_ATTEMPTS

log = logging.getLogger(__name__)

# A suspended process's end on the ladder: its owner is told before the signal.
SUSPENSION_ENDS = frozenset(
    {Reason.RESTORE_FAILED, Reason.SUSPEND_EXPIRED, Reason.HOST_MEMORY_SHORT}
)


@dataclass(frozen=True)
class Outcome:
    """What carrying out one step did, as a value: the signals that went out, the counters
    to bump, and the outcome of a notice or a restore as an update of its case. The node's
    batch commits it with the pass's samples (actuator/node_batch.py); nothing here changes
    the case."""

    sent: tuple[SignalSent, ...] = ()
    bumps: tuple[Bump, ...] = ()
    # A delivered notice starts the grace (after_notice); a restore not tried for want of
    # room says so (the next step waits for room instead of counting a refused try).
    update: CaseUpdate | None = None

    def then(self, later: Outcome) -> Outcome:
        update = self.update
        if later.update is not None:
            update = later.update if update is None else update.then(later.update)
        return Outcome(self.sent + later.sent, self.bumps + later.bumps, update)


NOTHING = Outcome()


@dataclass(frozen=True)
class Step:
    """One committed decision to carry out, with what the reconciler saw for it."""

    case: Case
    decision: Decision
    live: LiveState | None  # None for a signalled case (only survivors were asked about)
    eff: Effective
    node: Node
    scheduler: Scheduler | None  # looked up once per step: the live process's, or the owner
    now: float


@dataclass(frozen=True)
class Rehearsed:
    """A step's rehearsed signal, to be sent with the rest of its node's (NodeBatches)."""

    step: Step
    rehearsal: Rehearsal


class NoHandler(RuntimeError):
    """A rung of the ladder that the executor cannot carry out: it would be committed and
    audited but send nothing, so the executor refuses to exist instead."""


class Executor:
    def __init__(
        self,
        *,
        audit: AuditLog,
        notifier: Notifier,
        gate: NoticeGate,
        clock: Callable[[], float],
        mono: Callable[[], float],
        alerts: DecisionAlerts | None = None,
        links: KeepLinks | None = None,
        pictures: EvidencePictures | None = None,
        thresholds: tuple[tuple[str, float], ...] = (),
        promised: Callable[[str, float], tuple[str, ...]] | None = None,
    ) -> None:
        self.audit, self.notifier, self.gate = audit, notifier, gate
        # GPUs a node's wait list has given to a waiter since a time (a suspension's) whose
        # job has not appeared yet: never that restore's place.
        self.promised = promised
        self.clock, self.mono = clock, mono
        self.alerts, self.links, self.thresholds = alerts, links, thresholds
        self.pictures = pictures
        # One handler per rung of the ladder (actuator/ladder.py), checked here: exhaustive.
        self._effects: dict[Action, Callable[[Step], Outcome]] = {
            Action.NOTIFY: self._notify_owner,
            Action.SUSPEND: self._suspend,
            Action.TERM: self._stop,
            Action.KILL: self._stop,
            Action.RESUME: self._resume,  # the way back from the suspend rung
        }
        missing = [str(r.action) for r in LADDER if r.action not in self._effects]
        if missing:
            raise NoHandler(f"no handler for the ladder's rung(s) {', '.join(missing)}")

    def carry_out(self, step: Step, rehearsals: list[Rehearsed] | None = None) -> Outcome:
        """What the committed decision means: its rung's effect, then its new state's;
        returns what was done. A bare process's rehearsed signal goes into `rehearsals`
        where given (the node's batch sends them together), else to the node at once."""
        effect = self._effects.get(step.decision.action)  # WAIT and MOVE have none
        done = effect(step) if effect is not None else NOTHING
        state, case = step.decision.state, step.case
        if state == State.RECLAIMED:
            if effect is None and case.notified_at is not None:
                self._followup(case, step.eff)
            if step.scheduler is not None and step.scheduler.owns(case):
                self._verify(case, step.scheduler)
            if self.alerts is not None:
                self.alerts.reclaimed(case)
            done = done.then(self._counted(case))
        elif state == State.SUSPENDED:
            self._tell_suspension(step)
        elif state == State.FAILED and self.alerts is not None:
            self.alerts.failed(case)
        elif state == State.OBSERVED and step.live is not None:
            rehearsal = self._rehearse(step)
            if rehearsal is not None and rehearsals is not None:
                rehearsals.append(Rehearsed(step, rehearsal))
            elif rehearsal is not None:
                step.node.rehearse_many([rehearsal])
        return done

    # -- the effects -------------------------------------------------------------------

    def _notify_owner(self, step: Step) -> Outcome:
        if step.decision.code == Reason.DEMAND:
            self._warn_of_demand(step.case, step.eff, step.now)
            return NOTHING
        return self.notify(step.case, step.eff, step.now, dry_run=False)

    def _suspend(self, step: Step) -> Outcome:
        """The suspend rung: the node checkpoints the process (the driver's lock, then its
        checkpoint); whether it worked is proven at the next step, not taken from here."""
        case = step.case
        done = step.node.suspend(
            case.target, step.eff.suspend_lock_timeout, key=f"case-{case.id}-{case.version}"
        )
        return self._checkpoint_call(case, "SUSPEND", done)

    def _resume(self, step: Step) -> Outcome:
        """The owner asked it back: the node restores it onto its own GPU, else another of
        the same chip, and lets it run; with no room on either it is not tried."""
        case = step.case
        done = step.node.resume(
            case.target,
            need=case.gpu_memory_bytes,
            avoid=self.promised(case.node, case.suspend_at or 0.0) if self.promised else (),
            key=f"case-{case.id}-{case.version}",
        )
        room = CaseUpdate(restore_room=done.detail if done.no_room else "")
        if done.onto:  # restored onto another GPU: the case reads that one from now on
            room = room.then(CaseUpdate(restored_onto=done.onto))
        return self._checkpoint_call(case, "RESUME", done).then(Outcome(update=room))

    def _checkpoint_call(self, case: Case, name: str, done: CheckpointResult) -> Outcome:
        with contextlib.suppress(AuditError):
            self.audit.write(
                CheckpointCalled(
                    case=case.id, call=name, ok=done.ok, state=done.state, detail=done.detail
                ),
                sync=False,  # the call was made before this record could say so
            )
        if not done.ok:
            log.warning("case %d: %s failed: %s", case.id, name.lower(), done.detail)
            return NOTHING
        return Outcome(sent=(SignalSent(case.id, case.pid, name, self.clock()),))

    def _stop(self, step: Step) -> Outcome:
        """A signalling rung: the scheduler's verb where one owns the case, else the rung's
        signal to the recorded process tree. A suspension that ends so is told first."""
        case, scheduler, rung = step.case, step.scheduler, rung_of(step.decision.action)
        if step.decision.code in SUSPENSION_ENDS:
            self._tell_restore(case, step.eff, "stopping", step.decision.reason)
        if scheduler is not None and scheduler.owns(case):
            return self._through_scheduler(case, scheduler, rung, dry_run=False)
        assert rung.signal is not None
        return self._signal(case, step.node, rung.signal, dry_run=False)

    def _rehearse(self, step: Step) -> Rehearsal | None:
        """Observe/notify mode: the same side effects enforcement would use, as dry runs
        (the notice, and the rung after it): a scheduler's step here, a bare process's
        signal returned to be sent (None: nothing more to send)."""
        case, live, scheduler = step.case, step.live, step.scheduler
        rehearsed = FIRST_SIGNAL
        assert live is not None
        if step.eff.mode == "observe":
            self.notify(case, step.eff, step.now, dry_run=True)
        rehearsal = dataclasses.replace(case, members=list(live.members))
        if scheduler is not None:
            scheduler.claim(rehearsal, live).apply_to(rehearsal)  # a copy: nothing recorded
            if scheduler.owns(rehearsal):
                self._through_scheduler(rehearsal, scheduler, rehearsed, dry_run=True)
                return None
        assert rehearsed.signal is not None
        return Rehearsal(
            rehearsal.target,
            tuple(rehearsal.members),
            rehearsed.signal.name,
            key=f"case-{case.id}",
        )

    # -- the one place each side effect happens ------------------------------------------

    def notice(
        self,
        case: Case,
        eff: Effective,
        sigterm_at: float,
        kind: Kind = "warning",
        *,
        picture: bool = True,
    ) -> Notice | None:
        """What people are told, from the facts the node proved (None: it proved none), with
        the evidence picture when pictures are on (`picture`: False for rehearsals)."""
        facts = ProvenFacts.of_case(case)
        if facts is None:
            return None
        owner = case.owner or {}
        drawn = self.pictures.take(case) if picture and self.pictures is not None else None
        return Notice(
            kind=kind,
            case=case.id,
            facts=facts,
            waiting=case.demand_who or "",
            waiting_through=(case.demand_for or "").split(":", 1)[0],
            alertname=case.alertname,
            since=case.idle_since,
            deadline=sigterm_at,
            term_timeout=eff.term_timeout,
            grace=eff.grace,
            freed_bytes=case.freed_bytes,
            keep_url=self.links.url(case.id) if self.links else "",
            owner=OwnerHint(
                user=owner.get("user", ""),
                email=owner.get("email", ""),
                language=owner.get("language", ""),
            ),
            thresholds=self.thresholds,
            repeat_prior=eff.repeat_prior,
            repeat_window=eff.repeat_window,
            copy_project=eff.copy_project,
            keep_needs_sre=eff.keep_needs_sre,
            service=eff.service,
            service_window=eff.service_window,
            service_by=eff.service_by,
            service_ports=eff.service_seen_ports,
            service_clients=eff.service_clients,
            service_client_ago=eff.service_client_ago,
            service_watched=eff.service_watched,
            presence_grace=eff.presence_grace,
            presence_idle=eff.presence_idle,
            suspend=eff.suspend,
            picture_png=drawn.png if drawn else b"",
            picture_url=drawn.url if drawn else "",
        )

    def notify(self, case: Case, eff: Effective, now: float, *, dry_run: bool) -> Outcome:
        """The first notice: SIGTERM after the grace, or (reclaim_when: demand) kept until
        someone needs the GPU. Only a delivered one opens the way to any signal."""
        kept = eff.reclaim_when == ReclaimWhen.DEMAND
        sigterm_at = 0.0 if kept else now + eff.grace + case.notice_extra_grace
        notice = self.notice(
            case, eff, sigterm_at, "idle" if kept else "warning", picture=not dry_run
        )
        if notice is None:  # never: a notice follows a live re-check, which records facts
            log.error("case %d: no proven facts to tell anyone; not notified", case.id)
            return NOTHING
        result = self._told(case, lambda: self.notifier.send(notice, dry_run=dry_run))
        if dry_run:
            return NOTHING
        # The outcome, saved with the pass's samples (a lost one: sent again); read here
        # from a copy, as the case will be once the batch applies it.
        noticed = after_notice(case, result.delivered, self.gate, self.clock(), self.mono())
        told = dataclasses.replace(case)
        noticed.apply_to(told)
        with contextlib.suppress(AuditError):
            self.audit.write(
                NoticeSent(
                    case=case.id,
                    delivered=result.delivered,
                    detail=result.detail,
                    attempt=told.notice_attempts,
                    # reclaim_when: demand: delivered, but no grace runs until someone waits
                    grace_started=told.notified_mono is not None and not kept,
                    kind=notice.kind,
                ),
                sync=False,  # what was sent; fsync'd with the pass (AuditLog.flush)
            )
        # Told to chat last: the notice's outcome is recorded whatever this does.
        if self.alerts is not None and told.notified_mono is not None and not kept:
            self.alerts.scheduled(notice, told)  # the grace started
        return Outcome(update=noticed)

    @staticmethod
    def _told(case: Case, send: Callable[[], NoticeResult]) -> NoticeResult:
        """What a notifier answered. One that raised (a defect: notifiers answer) is an
        undelivered notice, so the notice's outcome is still recorded: the gate's retries and
        fallback take over, where an escaped exception left the outcome unrecorded and the
        notice was sent again at every pass."""
        try:
            return send()
        except Exception as exc:
            log.exception("case %d: the notifier raised instead of answering", case.id)
            return NoticeResult(False, f"the notifier raised {type(exc).__name__}: {exc}")

    def _warn_of_demand(self, case: Case, eff: Effective, now: float) -> None:
        """The second notice of `reclaim_when: demand`: someone waits, SIGTERM at the
        deadline. Best effort: the first notice, delivered, already said this would come."""
        notice = self.notice(case, eff, now + eff.grace + case.notice_extra_grace)
        if notice is None:
            log.error("case %d: no proven facts to tell anyone; not notified", case.id)
            return
        result = self._told(case, lambda: self.notifier.send(notice, dry_run=False))
        if self.alerts is not None:
            self.alerts.scheduled(notice, case)
        with contextlib.suppress(AuditError):
            self.audit.write(
                NoticeSent(
                    case=case.id,
                    delivered=result.delivered,
                    detail=result.detail,
                    demand=case.demand_for,
                    sigterm_at=notice.deadline,
                ),
                sync=False,
            )

    def _tell_suspension(self, step: Step) -> None:
        """Back to (or into) `suspended`: the owner is told it was suspended, or where the
        restore they asked for stands (the first wait for room, each refused try)."""
        case, code = step.case, step.decision.code
        if code == Reason.SUSPENDED:
            self._tell_restore(case, step.eff, "suspended", "")
        elif code == Reason.RESTORE_WAITING and case.restore_waits == 1:
            self._tell_restore(case, step.eff, "waiting", case.restore_room)
        elif code == Reason.RESTORE_FAILED:
            self._tell_restore(case, step.eff, "refused", step.decision.reason)

    def _tell_restore(self, case: Case, eff: Effective, news: RestoreNews, detail: str) -> None:
        """The owner is told of their suspended job: suspended (not stopped, how to resume
        it), its restore waiting for room, refused, or its end (best effort, audited: the
        work is kept, or the signal goes, either way)."""
        until = (case.suspend_at or self.clock()) + eff.suspend_max
        kind: Kind = "suspended" if news == "suspended" else "restore"
        notice = self.notice(case, eff, until, kind, picture=False)
        if notice is None:
            return
        notice = dataclasses.replace(
            notice,
            restore=news,
            restore_detail=detail,
            restore_try=case.restore_attempts,
            restore_tries=RESTORE_ATTEMPTS,
        )
        result = self._told(case, lambda: self.notifier.send(notice, dry_run=False))
        with contextlib.suppress(AuditError):
            self.audit.write(
                NoticeSent(
                    case=case.id,
                    delivered=result.delivered,
                    detail=result.detail,
                    kind=kind if news == "suspended" else f"restore_{news}",
                ),
                sync=False,
            )

    def _counted(self, case: Case) -> Outcome:
        """Reclaims by trigger, and (for demand) the time from the wait to a free GPU."""
        bumps: list[Bump] = [("reclaims", "demand" if case.demand_for else "idle", 1)]
        waited = None
        if case.demand_for is not None and case.demand_at is not None:
            waited = max(0.0, (case.exited_at or self.clock()) - case.demand_at)
            bumps += demand_to_free(waited)
        if waited is None:
            return Outcome(bumps=tuple(bumps))
        # Free, not yet handed off: the hand-off is proven only once the request's own
        # process holds the GPU (DemandPlanner.watch writes `handed_off` then).
        with contextlib.suppress(AuditError):
            self.audit.write(
                FreedForRequest(
                    case=case.id,
                    request=case.demand_for,
                    who=case.demand_who,
                    seconds_from_demand=round(waited, 3),
                ),
                sync=False,
            )
        return Outcome(bumps=tuple(bumps))

    def _followup(self, case: Case, eff: Effective) -> None:
        """What was freed, to whoever got the warning; best effort, audited."""
        notice = self.notice(case, eff, case.term_at or self.clock())
        if notice is None:
            return
        result = self._told(case, lambda: self.notifier.followup(notice))
        with contextlib.suppress(AuditError):
            self.audit.write(
                FollowupSent(case=case.id, delivered=result.delivered, detail=result.detail),
                sync=False,
            )

    def _signal(self, case: Case, node: Node, sig: signal.Signals, *, dry_run: bool) -> Outcome:
        results = node.signal_tree(
            case.target, case.members, sig, dry_run=dry_run, key=f"case-{case.id}"
        )
        now = self.clock()
        sent = tuple(SignalSent(case.id, r.pid, r.signal, now) for r in results if r.sent)
        try:
            self.audit.write(
                SignalsSent(case=case.id, signal=sig.name, results=[r.__dict__ for r in results]),
                sync=False,  # the signals went out before this record could say so
            )
        except AuditError as exc:
            log.error("case %d: %s", case.id, exc)
        return Outcome(sent=sent)

    def _through_scheduler(
        self, case: Case, scheduler: Scheduler, rung: Rung, *, dry_run: bool
    ) -> Outcome:
        assert rung.verb is not None
        step = scheduler.reclaim(case, rung.verb, dry_run=dry_run)
        if dry_run:
            log.info("case %d: DRY-RUN: would %s (%s)", case.id, step.name, step.detail)
            return NOTHING
        with contextlib.suppress(AuditError):
            self.audit.write(
                dataclasses.replace(step.record, case=case.id, ok=step.ok, detail=step.detail),
                sync=False,
            )
        if not step.ok:
            return NOTHING
        return Outcome(sent=(SignalSent(case.id, case.pid, step.name, self.clock()),))

    def _verify(self, case: Case, scheduler: Scheduler) -> None:
        with contextlib.suppress(AuditError):
            self.audit.write(dataclasses.replace(scheduler.verify(case), case=case.id), sync=False)
