"""Pure decision functions: durable case + live evidence + policy + `now` -> what to do, why.

Nothing here performs I/O or reads a clock; the reconciler carries the decisions out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from actuator.decision import Decision, defer, move, wait
from actuator.demand.fit import Choice, Verdict
from actuator.keep_bounds import owner_allowance
from actuator.ladder import SIGNALLED_STATES, Action, next_rung, rung_at, rung_of, takes_tree
from actuator.models import (
    Case,
    CaseUpdate,
    LiveState,
    Member,
    Reason,
    State,
)
from actuator.policy import Breaker, Effective, Idle, Limits, Mode, Notice, ReclaimWhen
from actuator.suspension import SUSPENSION_STATES, decide_suspension, why_not_suspended
from exporter.procfs import CLOCK_TICKS
from exporter.thresholds import SHIPPED, Thresholds
from exporter.units import format_duration, format_size

STALLED_ALERTS = frozenset({"GpuProcessStalled"})
DEFAULT_NOTICE = Notice()


@dataclass(frozen=True)
class FleetState:
    """Fleet-wide facts a decision needs, read from the store by the reconciler."""

    unresolved: int
    breaker_open: bool = False
    terminations_node_hour: int = 0
    terminations_minute: int = 0
    kept_until: float | None = None  # a keep its owner asked before the case opened (wall)
    # reclaim_when: demand: whether someone waits for this case's GPU (None: not asked)
    demand: Choice | None = None


def not_twice(
    decision: Decision,
    tree: Iterable[tuple[int, int]],
    signalled: Mapping[tuple[int, int], int],
) -> Decision:
    """No process gets one step twice: a SIGTERM waits while another live case is
    signalling any process of this tree (`tree`: (pid, start ticks), the target's
    included; `signalled`: those other cases' trees). A DataLoader worker flagged on its
    own is reached by its parent's tree signal and its case ends when it exits; a parent
    whose worker's own case signalled it goes on once the worker has exited."""
    if not takes_tree(decision.action) or not any(p in signalled for p in tree):
        return decision
    return Decision(Action.WAIT, updates=decision.updates)


# A case refused again and again because its evidence stays unknown (per-process utilisation
# unsupported, an agent gone for good) is asked at most this many windows apart.
REARM_BACKOFF_CAP = 8
REARM_LOOKBACK = REARM_BACKOFF_CAP.bit_length()  # refusals in a row that reach the cap


def rearm_wait(window: float, unknown_in_a_row: int) -> float:
    """How long after a case ended it re-arms while its alert fires: one window after
    activity cancelled it or after a first refusal on unknown evidence (often a NVML call
    that hung for seconds); doubling with each refusal in a row on unknown evidence, up to
    `REARM_BACKOFF_CAP` windows, so evidence that stays unknown is asked again rarely
    (and audited rarely) but never given up on."""
    if unknown_in_a_row <= 1:
        return window
    return window * min(2 ** (unknown_in_a_row - 1), REARM_BACKOFF_CAP)


def is_stalled_class(alertname: str) -> bool:
    return alertname in STALLED_ALERTS


def check_identity(case: Case, live: LiveState) -> Decision | None:
    """Refuse or cancel unless the live process is the case's process, unprotected.

    Same process = same boot id and start ticks (exactly: the rule dedup uses too)."""
    if not live.exists:
        detail = f" ({'; '.join(live.errors)})" if live.errors else ""
        return move(State.CANCELLED, Reason.PROCESS_EXITED, f"the process exited by itself{detail}")
    if live.start_ticks is None or live.uid is None or live.boot_id is None:
        detail = "; ".join(live.errors) or "unreadable"
        return move(State.REFUSED, Reason.UNKNOWN_EVIDENCE, f"cannot read the process: {detail}")
    if live.boot_id != case.boot_id:
        return move(
            State.REFUSED,
            Reason.IDENTITY_MISMATCH,
            f"the node booted again (boot id {live.boot_id}, the alert's {case.boot_id})",
        )
    if live.start_ticks != case.start_ticks:
        return move(
            State.REFUSED,
            Reason.IDENTITY_MISMATCH,
            f"pid {case.pid} now belongs to a process started at tick {live.start_ticks}, "
            f"not {case.start_ticks} (PID reused)",
        )
    if case.uid is not None and live.uid != case.uid:
        return move(
            State.REFUSED, Reason.IDENTITY_MISMATCH, f"uid is {live.uid}, the alert said {case.uid}"
        )
    if live.protected is not None:
        return move(State.REFUSED, Reason.PROTECTED, f"protected: {live.protected}")
    return None


def check_idle(
    case: Case, live: LiveState, idle: Idle, now: float, limits: Thresholds = SHIPPED
) -> Decision | None:
    """Cancel on live activity, refuse on unknown evidence; None when idle is confirmed
    so far. The thresholds are the rules' own (exporter/thresholds.py)."""
    if live.gpu_found is False:
        return move(
            State.REFUSED, Reason.UNKNOWN_EVIDENCE, f"GPU {case.uuid} not found on the node"
        )
    if live.on_gpu is None or live.gpu_memory_bytes is None:
        detail = "; ".join(live.errors) or "unknown"
        return move(State.REFUSED, Reason.UNKNOWN_EVIDENCE, f"GPU evidence unknown: {detail}")
    if not live.on_gpu:
        return move(
            State.CANCELLED, Reason.RELEASED, "the process itself no longer holds memory on the GPU"
        )
    baseline = case.gpu_memory_bytes
    if baseline is not None and live.gpu_memory_bytes > baseline + limits.max_memory_growth_bytes:
        return move(
            State.CANCELLED,
            Reason.ACTIVITY,
            f"GPU memory grew from {baseline} to {live.gpu_memory_bytes} bytes",
        )
    if live.network_unknown:
        return move(
            State.REFUSED,
            Reason.UNKNOWN_EVIDENCE,
            f"its network is unknown: {live.network_unknown}"[:500],
        )
    # The node's meter counts only what moved after its first reading of the tree, so any
    # data since the case opened is work the rules could not yet see (a served request).
    moved = live.network_activity
    if moved is not None and (now - moved < idle.log_quiet_for or moved >= case.created):
        return move(
            State.CANCELLED,
            Reason.ACTIVITY,
            f"data moved on its connections {now - moved:.1f}s ago, beyond keep-alive "
            f"(after the case opened, or within the {idle.log_quiet_for:g}s of quiet required)",
        )
    last = live.last_activity
    if last is not None and now - last < idle.log_quiet_for:
        source = "heartbeat" if last == live.heartbeat else "log"
        return move(
            State.CANCELLED,
            Reason.ACTIVITY,
            f"{source} written {now - last:.1f}s ago (quiet for {idle.log_quiet_for:g}s required)",
        )
    if live.listening_external is not None and live.network_covered is not True:
        # Read, but not yet for a whole window: a first reading is a baseline, and a download
        # under way when the case opened shows only at the next one. Unknown, never quiet.
        return wait()
    if is_stalled_class(case.alertname):
        if last is None:
            return move(
                State.REFUSED,
                Reason.UNKNOWN_EVIDENCE,
                "a Stalled alert, but the process has no heartbeat or log to be stale",
            )
        return None  # a hang can read 100 % util and spin CPU: staleness + memory suffice
    if live.sm_util is None:
        why = live.util_unknown or "unsupported or NVML error"
        return move(
            State.REFUSED, Reason.UNKNOWN_EVIDENCE, f"per-process SM utilisation is unknown ({why})"
        )
    if live.sm_util > limits.max_sm_util:
        return move(
            State.CANCELLED,
            Reason.ACTIVITY,
            f"SM utilisation {live.sm_util:.0%} > {limits.max_sm_util:.0%}",
        )
    if live.cpu_seconds is None:
        return move(State.REFUSED, Reason.UNKNOWN_EVIDENCE, "process-tree CPU time unknown")
    return None


def last_look(
    case: Case,
    before: LiveState,
    after: LiveState,
    idle: Idle,
    now: float,
    limits: Thresholds = SHIPPED,
) -> Decision | None:
    """The target looked at again right before a SIGTERM is committed (`before`: the
    re-check the decision was made on, read before the step waited its turn; `after`:
    now). A process that resumed work in between is not signalled: any log or heartbeat
    write since, activity by the re-check's own rules, or its tree's CPU over the gap; a
    reading that cannot be judged holds the signal to the next step. None: go on."""
    if not after.exists or check_identity(case, after) is not None:
        return wait()  # exited or changed meanwhile: the next step decides on that
    if case.state in SUSPENSION_STATES:
        return None  # checkpointed: off the GPU, it cannot work there; nothing to judge
    # On the node's clock: the two readings' offsets differ by their calls' latency, and a
    # write the re-check saw would look newer by that much on this actuator's clock.
    written = _node_time(after, after.last_activity)
    seen = _node_time(before, before.last_activity)
    # New since the re-check: after the write it saw, or (it saw none) from when it was taken.
    taken = before.on_node_clock(before.sampled_at)
    new = written is not None and (written > seen if seen is not None else written >= taken)
    if new and after.last_activity is not None:
        return move(
            State.CANCELLED,
            Reason.ACTIVITY,
            f"written {now - after.last_activity:.1f}s ago, after the re-check: the last "
            "look before SIGTERM found it working again",
        )
    found = check_idle(case, after, idle, now, limits)
    if found is not None:
        return found if found.state == State.CANCELLED else wait()
    if is_stalled_class(case.alertname):
        return None  # a hang may spin CPU: its stale log and heartbeat were looked at above
    gap = after.on_node_clock(after.sampled_at) - before.on_node_clock(before.sampled_at)
    if before.cpu_seconds is not None and after.cpu_seconds is not None and gap > 0.05:
        # Less what the readings cannot resolve: over a tenth of a second one clock tick of
        # an idle Python process would read as 0.1 cores.
        used = after.cpu_seconds - before.cpu_seconds - cpu_resolution(after)
        rate = max(0.0, used) / gap
        if rate > limits.max_cpu_cores:
            return move(
                State.CANCELLED,
                Reason.ACTIVITY,
                f"process tree used {rate:.2f} CPU cores since the re-check (the last look "
                "before SIGTERM)",
            )
    return None


def cpu_resolution(live: LiveState) -> float:
    """The most a difference of two tree CPU readings can be off by: /proc counts user and
    system time in whole clock ticks, each rounded down, for every process in the tree."""
    processes = max(1, len(live.members) + len(live.excluded))
    return 2 * processes / CLOCK_TICKS


def _node_time(live: LiveState, ts: float | None) -> float | None:
    return None if ts is None else live.on_node_clock(ts)


# A CPU reading older than this is no window's start: the actuator was away, or (before
# readings were kept on the node's clock) it was taken on another clock. Start afresh.
STALE_CPU_READING = 3600.0


def roll_cpu(
    case: Case, live: LiveState, idle: Idle, limits: Thresholds = SHIPPED
) -> tuple[Decision | None, dict[str, Any]]:
    """CPU rate of the process tree over windows of at least `cpu_window` seconds. The
    window is measured on the node's clock (`cpu_at` is kept there): through an agent each
    reading's offset onto this clock carries its call's latency, which over a one-second
    window would read a busy tree as idle."""
    assert live.cpu_seconds is not None
    taken = live.on_node_clock(live.sampled_at)
    fresh = {"cpu_seconds": live.cpu_seconds, "cpu_at": taken}
    if case.cpu_seconds is None or case.cpu_at is None or live.cpu_seconds < case.cpu_seconds:
        return None, fresh
    dt = taken - case.cpu_at
    if dt < 0 or dt > STALE_CPU_READING:
        return None, {**fresh, "cpu_rate": None}  # no window to judge: one more is needed
    if dt < idle.cpu_window:
        return None, {}
    rate = (live.cpu_seconds - case.cpu_seconds) / dt
    updates = {"cpu_seconds": live.cpu_seconds, "cpu_at": taken, "cpu_rate": rate}
    if rate > limits.max_cpu_cores:
        return move(
            State.CANCELLED,
            Reason.ACTIVITY,
            f"process tree used {rate:.2f} CPU cores over {dt:.1f}s (> {limits.max_cpu_cores})",
            **updates,
        ), updates
    return None, updates


def held_back(case: Case, guard: FleetState, limits: Limits) -> tuple[Reason, str] | None:
    """(code, why) when the breaker or a blast-radius limit holds enforcement back."""
    if guard.breaker_open:
        return Reason.CIRCUIT_BREAKER_OPEN, "circuit breaker open: not enforcing"
    per_node = limits.per_node_hour(case.node)
    if guard.terminations_node_hour >= per_node:
        return (
            Reason.LIMIT_NODE_HOUR,
            f"{guard.terminations_node_hour} terminations on {case.node} in the last hour "
            f"(limit {per_node})",
        )
    if guard.terminations_minute >= limits.terminations_per_minute:
        return (
            Reason.LIMIT_MINUTE,
            f"{guard.terminations_minute} terminations in the last minute "
            f"(limit {limits.terminations_per_minute})",
        )
    return None


def decide_unreachable(
    case: Case, why: str, *, mono: float, wait_for: float, give_up: float
) -> Decision:
    """The node's agent gave no usable answer: wait, then defer, then give up; never act on
    a guess. A case already signalled is only ended (failed) when the agent stays away."""
    since = case.unreachable_since_mono
    if since is None:
        return wait(unreachable_since_mono=mono)
    away = mono - since
    reason = f"the node's agent has not answered for {away:.0f}s: {why}"[:500]
    if away >= give_up:
        if case.state in SIGNALLED_STATES:
            return move(State.FAILED, Reason.AGENT_UNREACHABLE, reason)
        return move(State.REFUSED, Reason.AGENT_UNREACHABLE, reason)
    if away >= wait_for and case.state not in SIGNALLED_STATES | {State.DEFERRED}:
        return defer(case, (Reason.AGENT_UNREACHABLE, reason), {})
    return wait()


def suspends_next(case: Case, live: LiveState, eff: Effective) -> bool:
    """Whether the step after the notice is the suspend rung for this process now: it keeps
    the work and frees the GPU, so nothing gentler is left for presence to hold it for."""
    after = next_rung(Action.NOTIFY)
    return after is not None and after.optional and why_not_suspended(case, live, eff) is None


def owner_present(case: Case, live: LiveState, eff: Effective, mono: float) -> str | None:
    """Why the owner's presence holds the step after the notice back, or None: presence only
    ever makes a decision gentler, for at most `presence_grace` past the grace; absent,
    unknown (not read) or past that, it holds nothing; nor once the owner said go ahead;
    nor a suspension, which loses no work (a present owner keeps it from the keep page)."""
    if eff.presence_grace <= 0 or live.presence is None or case.notified_mono is None:
        return None
    if suspends_next(case, live, eff):
        return None
    if case.release_requested_mono is not None:
        return None
    until = case.notified_mono + eff.grace + case.notice_extra_grace + eff.presence_grace
    if mono >= until:
        return None
    seen = live.presence.present(eff.presence_idle)
    if seen is None:
        return None
    return (
        f"its owner is on the node ({seen}): the reclaim waits while they are, "
        f"{format_duration(until - mono)} at most"
    )


def would_do(eff: Effective) -> str:
    when = (
        f"{eff.grace:g}s after someone needs its GPU"
        if eff.reclaim_when == ReclaimWhen.DEMAND
        else f"after {eff.grace:g}s"
    )
    return f"would notify the owner, send SIGTERM {when} and SIGKILL {eff.term_timeout:g}s later"


def on_demand(
    case: Case, eff: Effective, choice: Choice | None, now: float, mono: float
) -> Decision | None:
    """`reclaim_when: demand`, once the owner was told the process is idle: the grace runs
    only while a waiting request this GPU serves exists (the second notice says so); demand
    that goes away stops the escalation, unknown demand holds it. None: the grace is over
    (or the owner released it), go on as for any case."""
    if case.release_requested_mono is not None:  # the owner said: go ahead
        return None
    if choice is None or choice.verdict == Verdict.UNKNOWN:
        # Unknown demand is no demand: held, never signalled; a grace already running is
        # not reset by a source's outage, and goes on only once the request is known again.
        return wait()
    if choice.verdict != Verdict.CHOSEN:
        if case.demand_mono is None:
            return wait()
        return move(
            State.NOTIFIED,
            Reason.DEMAND_GONE,
            f"escalation stopped: {choice.reason}; the process waits until someone needs its GPU",
            demand_for=None,
            demand_who=None,
            demand_at=None,
            demand_mono=None,
        )
    assert choice.request is not None
    if case.demand_mono is None or case.demand_for != choice.request.ref:
        return Decision(
            Action.NOTIFY,
            State.NOTIFIED,
            Reason.DEMAND,
            choice.reason,
            CaseUpdate(
                demand_for=choice.request.ref,
                demand_who=choice.request.who,
                demand_at=now,
                demand_mono=mono,
            ),
        )
    if mono < case.demand_mono + eff.grace + case.notice_extra_grace:
        return wait()
    return None


def after_notice(
    case: Case, delivered: bool, notice: Notice, now: float, mono: float
) -> CaseUpdate:
    """Case updates once a notice was (or was not) delivered: only a delivered notice starts
    the grace, unless the policy says notices are not required."""
    if delivered or not notice.required:
        return CaseUpdate(notified_at=now, notified_mono=mono, next_notice_mono=None)
    return CaseUpdate(
        notice_attempts=case.notice_attempts + 1, next_notice_mono=mono + notice.retry_interval
    )


def _notice_pending(case: Case, notice: Notice, now: float, mono: float) -> Decision:
    """A notified case whose notice has not been delivered yet."""
    if case.next_notice_mono is not None and mono < case.next_notice_mono:
        return wait()
    sends = notice.retries + 1
    if case.notice_attempts < sends:
        return Decision(
            Action.NOTIFY,
            State.NOTIFIED,
            Reason.NOTICE_RETRY,
            f"the notice was not delivered; sending it again ({case.notice_attempts + 1} of "
            f"{sends})",
        )
    if notice.undelivered == "extra_grace":
        return move(
            State.NOTIFIED,
            Reason.NOTICE_UNDELIVERED,
            f"the owner could not be notified ({sends} attempts): grace extended by "
            f"{notice.extra_grace:g}s",
            notified_at=now,
            notified_mono=mono,
            notice_extra_grace=notice.extra_grace,
        )
    return move(
        State.REFUSED,
        Reason.NOTICE_UNDELIVERED,
        f"the owner could not be notified ({sends} attempts): nothing is signalled without a "
        "delivered notice",
    )


def decide_live(
    case: Case,
    live: LiveState,
    eff: Effective,
    idle: Idle,
    limits: Limits,
    guard: FleetState,
    now: float,
    thresholds: Thresholds = SHIPPED,
    *,
    mono: float,
    notice: Notice = DEFAULT_NOTICE,
) -> Decision:
    """Next step for a case that has not been signalled (pending, notified, snoozed,
    deferred). `now` is wall time (compared with the alert's startsAt and with heartbeat and
    log timestamps); every wait is measured on `mono`, the boot-time clock."""
    if case.state in SUSPENSION_STATES:  # off the GPU: its alert resolves, the case does not
        return decide_suspension(case, live, eff, now, mono)
    if guard.unresolved == 0:
        return move(State.CANCELLED, Reason.RESOLVED, "the alert resolved")
    if case.state == State.SNOOZED:
        if case.snoozed_until_mono is not None and mono < case.snoozed_until_mono:
            return wait()
        return move(
            State.PENDING,
            Reason.SNOOZE_EXPIRED,
            "the snooze expired",
            cpu_seconds=None,
            cpu_rate=None,
        )
    problem = check_identity(case, live)
    if problem is not None:
        return problem
    if eff.protected:
        return move(State.REFUSED, Reason.PROTECTED, f"protected by policy rule {eff.rule}")
    if case.state == State.PENDING and guard.kept_until is not None and now < guard.kept_until:
        left = guard.kept_until - now
        return move(
            State.SNOOZED,
            Reason.KEPT_AHEAD,
            f"kept by its owner before the case opened, for {format_duration(left)} more",
            snoozed_until=guard.kept_until,
            snoozed_until_mono=mono + left,
        )
    problem = check_idle(case, live, idle, now, thresholds)
    if problem is not None:
        return problem
    samples: dict[str, Any] = {}
    if case.gpu_memory_bytes is None:
        samples["gpu_memory_bytes"] = live.gpu_memory_bytes
    if case.uid is None:
        samples["uid"] = live.uid
    # The node's start time (boot time plus start ticks) replaces the alert's claim: a label
    # names the process, and every fact a bound or a notice uses comes from the node.
    started = live.start_time
    if started is not None and started != case.start_time:
        samples["start_time"] = started
    if not is_stalled_class(case.alertname):
        problem, cpu = roll_cpu(case, live, idle, thresholds)
        if problem is not None:
            return problem
        samples.update(cpu)
        if cpu.get("cpu_rate", case.cpu_rate) is None:
            return wait(**samples)  # need one full CPU window of evidence first
    held = held_back(case, guard, limits)
    if case.state == State.DEFERRED:
        if case.reason_code == Reason.OWNER_PRESENT and owner_present(case, live, eff, mono):
            return wait(**samples)  # still around, and the presence grace still runs
        if held is not None:
            return wait(**samples)
        back = State(case.deferred_from or State.PENDING)
        return move(
            back,
            Reason.RESUMED,
            f"no longer held back: back to {back}",
            deferred_from=None,
            **samples,
        )
    if held is not None and held[0] == Reason.CIRCUIT_BREAKER_OPEN:
        return defer(case, held, samples)
    if case.state == State.PENDING:
        if now - case.idle_since < eff.idle_for:
            return wait(**samples)
        if started is None or now - started < eff.min_runtime:
            return wait(**samples)  # still starting up (or unknown): never judged idle yet
        allowance = owner_allowance(live.keep_asked, eff)
        kept_until = started + allowance.seconds
        if now < kept_until:
            left = kept_until - now
            return move(
                State.SNOOZED,
                Reason.KEPT_AS_ASKED,
                f"kept by its owner: {allowance.note}, {format_duration(left)} more",
                snoozed_until=kept_until,
                snoozed_until_mono=mono + left,
                **samples,
            )
        if eff.mode == Mode.OBSERVE:
            return move(
                State.OBSERVED, Reason.OBSERVE_MODE, f"observe mode: {would_do(eff)}", **samples
            )
        if held is not None:
            return defer(case, held, samples)
        # A fresh first notice (after a snooze, too): no grace is running towards a request.
        samples.update(
            notice_attempts=0,
            next_notice_mono=None,
            notified_mono=None,
            demand_for=None,
            demand_who=None,
            demand_at=None,
            demand_mono=None,
        )
        return Decision(
            Action.NOTIFY, State.NOTIFIED, Reason.IDLE, "idle confirmed live", CaseUpdate(**samples)
        )
    if case.state == State.NOTIFIED:
        if case.notified_mono is None:
            pending = _notice_pending(case, notice, now, mono)
            return replace(pending, updates=CaseUpdate(**samples).then(pending.updates))
        released = case.release_requested_mono is not None  # the owner said: go ahead
        if eff.reclaim_when == ReclaimWhen.DEMAND:
            waiting = on_demand(case, eff, guard.demand, now, mono)
            if waiting is not None:
                return replace(waiting, updates=CaseUpdate(**samples).then(waiting.updates))
        elif not released and mono < case.notified_mono + eff.grace + case.notice_extra_grace:
            return wait(**samples)
        if eff.mode != Mode.ENFORCE:
            return move(
                State.OBSERVED,
                Reason.OBSERVE_MODE if eff.mode == Mode.OBSERVE else Reason.NOTIFY_MODE,
                f"{eff.mode} mode: would send SIGTERM, then SIGKILL after {eff.term_timeout:g}s",
                **samples,
            )
        if held is not None:
            return defer(case, held, samples)
        seen = owner_present(case, live, eff, mono)
        if seen is not None:
            return defer(case, (Reason.OWNER_PRESENT, seen), samples)
        after = next_rung(Action.NOTIFY)
        assert after is not None  # the notice always leads somewhere
        code, reason = rung_of(Action.NOTIFY).timeout_code, "still idle after the grace period"
        if eff.reclaim_when == ReclaimWhen.DEMAND and case.demand_who:
            code, reason = Reason.DEMAND, f"still idle after the grace; {case.demand_who} waits"
        if after.optional:  # the suspend rung, where the process is eligible
            why_not = why_not_suspended(case, live, eff)
            if why_not is None:
                samples["gpu_used_before"] = live.gpu_used_bytes
                return Decision(
                    after.action,
                    after.state,
                    code,
                    f"{reason}: suspended (checkpointed into host memory), not signalled",
                    CaseUpdate(**samples),
                )
            if eff.suspend:
                reason = f"{reason} (not suspended: {why_not})"
            after = next_rung(after.action)
            assert after is not None
        return Decision(after.action, after.state, code, reason, CaseUpdate(**samples))
    return wait(**samples)


def decide_signalled(
    case: Case,
    alive: list[Member],
    gpu_listed: dict[int, int] | None,
    eff: Effective,
    now: float,
    *,
    mono: float,
) -> Decision:
    """Next step for a case that has been sent SIGTERM or SIGKILL (waits on `mono`): while
    any member lives, the rung's timeout leads to the ladder's next rung (or to failure)."""
    if alive:
        rung = rung_at(case.state)
        started = getattr(case, rung.stamps.mono) if rung and rung.stamps else None
        if rung is None or started is None:
            return wait()
        runs_for = float(getattr(eff, rung.timeout))
        if mono < started + runs_for:
            return wait()
        after = next_rung(rung.action)
        said = f"{rung.signal.name if rung.signal else rung.action}"
        if after is None:
            return move(
                State.FAILED,
                rung.timeout_code,
                f"pids {[m.pid for m in alive]} survived {said} for {runs_for:g}s",
            )
        return Decision(
            after.action,
            after.state,
            rung.timeout_code,
            f"{len(alive)} process(es) still alive {runs_for:g}s after {said}",
        )
    exited = case.exited_mono if case.exited_mono is not None else mono
    updates: dict[str, Any] = (
        {} if case.exited_mono is not None else {"exited_at": now, "exited_mono": mono}
    )
    pids = {m.pid for m in case.members} | {case.pid}
    if gpu_listed is not None and not pids & gpu_listed.keys():
        return move(
            State.RECLAIMED,
            Reason.RECLAIMED,
            f"process tree exited; {format_size(case.gpu_memory_bytes or 0)} freed on {case.uuid}",
            freed_bytes=case.gpu_memory_bytes or 0,
            **updates,
        )
    if mono >= exited + eff.release_timeout:
        if gpu_listed is None:
            return move(
                State.FAILED,
                Reason.UNVERIFIED,
                "process tree exited but NVML cannot confirm",
                **updates,
            )
        held = sum(b for p, b in gpu_listed.items() if p in pids)
        return move(
            State.FAILED,
            Reason.MEMORY_HELD,
            f"process tree exited but {held} bytes are still listed on {case.uuid}",
            **updates,
        )
    return wait(**updates)


def breaker_should_open(flagged: int, monitored: int | None, breaker: Breaker) -> str | None:
    """Why the breaker should open, or None (unknown monitored count never trips it)."""
    if monitored is None or flagged < breaker.min_flagged:
        return None
    share = flagged / max(monitored, 1)
    if share > breaker.max_share:
        return (
            f"{flagged} of {monitored} monitored processes flagged within "
            f"{breaker.window:g}s ({share:.0%} > {breaker.max_share:.0%})"
        )
    return None
