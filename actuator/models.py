"""Alertmanager webhook payloads (version 4) and the actuator's own records."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from enum import Enum, StrEnum
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

from exporter.procfs import PID_MAX_LIMIT
from exporter.units import format_duration

MAX_ALERTS = 10_000
RECLAIMABLE_LABEL = ("reclaim", "true")


def epoch(ts: datetime) -> float:
    return ts.astimezone(UTC).timestamp()


def _representable(ts: datetime) -> datetime:
    """Reject datetimes whose UTC form falls outside datetime's range (year 1 at +01:00)."""
    try:
        epoch(ts)
    except (OverflowError, ValueError, OSError):
        raise ValueError("datetime out of range") from None
    return ts


def _end_representable(ts: datetime | None) -> datetime | None:
    return ts if ts is None or is_zero_time(ts) else _representable(ts)


class AlertmanagerAlert(BaseModel):
    # Unknown fields are ignored: Alertmanager may add some in later versions.
    model_config = ConfigDict(extra="ignore", frozen=True)

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = {}
    startsAt: AwareDatetime
    endsAt: AwareDatetime | None = None
    generatorURL: str = ""
    fingerprint: str = Field(min_length=1, max_length=128)

    _starts_in_range = field_validator("startsAt")(_representable)
    _ends_in_range = field_validator("endsAt")(_end_representable)


class AlertmanagerPayload(BaseModel):
    """The envelope. Its alerts are objects here and validated one by one (`split_alerts`),
    so one bad alert never costs the good ones of the same group."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    version: Literal["4"]
    groupKey: str = ""
    truncatedAlerts: int = Field(0, ge=0)
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupLabels: dict[str, str] = {}
    commonLabels: dict[str, str] = {}
    commonAnnotations: dict[str, str] = {}
    externalURL: str = ""
    alerts: list[dict[str, Any]] = Field(max_length=MAX_ALERTS)


@dataclass(frozen=True)
class RejectedAlert:
    fingerprint: str | None
    errors: tuple[str, ...]


def split_alerts(
    payload: AlertmanagerPayload,
) -> tuple[list[AlertmanagerAlert], list[RejectedAlert]]:
    """(valid alerts, rejected ones with why); never raises."""
    good: list[AlertmanagerAlert] = []
    bad: list[RejectedAlert] = []
    for raw in payload.alerts:
        try:
            good.append(AlertmanagerAlert.model_validate(raw))
        except ValidationError as exc:
            fingerprint = raw.get("fingerprint")
            errors = tuple(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)[:10]
            )
            bad.append(RejectedAlert(fingerprint if isinstance(fingerprint, str) else None, errors))
    return good, bad


def reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads object hook: a key given twice is ambiguous ("status" resolved, then firing)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:64]!r}")
        out[key] = value
    return out


def is_zero_time(ts: datetime | None) -> bool:
    """Alertmanager sends 0001-01-01T00:00:00Z for "no end yet"."""
    return ts is None or ts.year <= 1


def is_reclaimable(alert: AlertmanagerAlert) -> bool:
    key, value = RECLAIMABLE_LABEL
    return alert.labels.get(key) == value


class State(StrEnum):
    PENDING = "pending"
    NOTIFIED = "notified"
    TERMINATING = "terminating"
    KILLING = "killing"
    SNOOZED = "snoozed"
    RECLAIMED = "reclaimed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REFUSED = "refused"
    OBSERVED = "observed"
    DEFERRED = "deferred"  # a limit or the breaker holds it: re-evaluated, not final
    SUSPENDING = "suspending"  # the checkpoint was asked for; the node has not proven it yet
    SUSPENDED = "suspended"  # checkpointed, its GPU proven free; the process lives on
    RESUMING = "resuming"  # the owner asked it back; the restore is not proven yet


LIVE_STATES = frozenset(
    {State.PENDING, State.NOTIFIED, State.TERMINATING, State.KILLING, State.SNOOZED}
    | {State.DEFERRED, State.SUSPENDING, State.SUSPENDED, State.RESUMING}
)
ENDED_STATES = frozenset(set(State) - LIVE_STATES)


class Reason(StrEnum):
    """Why a case is in its state: the `reason_code` of cases, audit records and metrics."""

    # cancelled: the job is working or gone
    PROCESS_EXITED = "process_exited"
    RELEASED = "released"
    ACTIVITY = "activity"
    RESOLVED = "resolved"
    # refused: not provably safe
    PROTECTED = "protected"
    IDENTITY_MISMATCH = "identity_mismatch"
    UNKNOWN_EVIDENCE = "unknown_evidence"
    UNKNOWN_NODE = "unknown_node"
    AGENT_UNREACHABLE = "agent_unreachable"  # deferred, then refused, while it lasts
    SLURM_JOB_BUSY = "slurm_job_busy"  # deferred: another rank of the job is not idle
    POD_BLOCKED = "pod_blocked"  # deferred: a disruption budget, or the API server is away
    OWNER_PRESENT = "owner_present"  # deferred past the grace: the owner is on the node
    BAD_TARGET = "bad_target"
    NOTICE_UNDELIVERED = "notice_undelivered"
    # deferred: held back by the breaker or a blast-radius limit
    CIRCUIT_BREAKER_OPEN = "circuit_breaker_open"
    LIMIT_NODE_HOUR = "limit_node_hour"
    LIMIT_MINUTE = "limit_minute"
    # the way through
    IDLE = "idle"
    NOTICE_RETRY = "notice_retry"
    OBSERVE_MODE = "observe_mode"
    NOTIFY_MODE = "notify_mode"
    RESUMED = "resumed"
    SNOOZED = "snoozed"
    KEPT_AHEAD = "kept_ahead"
    KEPT_AS_ASKED = "kept_as_asked"  # GPU_RECLAIMER_KEEP, or the pod's keep annotation
    # reclaim_when: demand (actuator/demand/)
    DEMAND = "demand"  # someone waits for this GPU: the grace starts
    DEMAND_GONE = "demand_gone"  # the wait ended (or another GPU serves it): waits again
    SNOOZE_EXPIRED = "snooze_expired"
    REARMED = "rearmed"
    TERM_TIMEOUT = "term_timeout"
    MEMORY_HELD = "memory_held"
    RECLAIMED = "reclaimed"
    UNKILLABLE = "unkillable"
    UNVERIFIED = "unverified"
    # the suspend rung (actuator/ladder.py)
    SUSPENDED = "suspended"  # checkpointed and proven: the GPU is free, the process lives
    NOT_SUSPENDED = "not_suspended"  # the checkpoint failed or was not proven in time
    SUSPEND_EXPIRED = "suspend_expired"  # suspended for suspend_max: the ladder goes on
    HOST_MEMORY_SHORT = "host_memory_short"  # the node's memory runs short: the ladder goes on
    RESUME_ASKED = "resume_asked"  # its owner asked it back
    RESUMED_AS_ASKED = "resumed_as_asked"  # restored onto a GPU and running, kept
    RESTORE_FAILED = "restore_failed"  # the driver refused the restore: still suspended
    RESTORE_WAITING = "restore_waiting"  # no GPU had room: not tried, first in line for it


REFUSALS = frozenset(
    {
        Reason.PROTECTED,
        Reason.IDENTITY_MISMATCH,
        Reason.UNKNOWN_EVIDENCE,
        Reason.UNKNOWN_NODE,
        Reason.BAD_TARGET,
        Reason.NOTICE_UNDELIVERED,
        Reason.AGENT_UNREACHABLE,
    }
)
HOLDS = frozenset(
    {
        Reason.CIRCUIT_BREAKER_OPEN,
        Reason.LIMIT_NODE_HOUR,
        Reason.LIMIT_MINUTE,
        Reason.AGENT_UNREACHABLE,
        Reason.SLURM_JOB_BUSY,
        Reason.POD_BLOCKED,
    }
)


# Label values are ASCII decimal only: str.isdigit() and int() also accept full-width and
# other Unicode digits (full-width "12" is 12 to int()), so a forged label could name a PID.
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")
_BOOT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z/-]{1,90}")
MAX_UID = 2**32 - 2  # 2**32-1 is (uid_t)-1, "no uid"
MAX_START_TICKS = 2**63 - 1


def parse_decimal(text: str | None, low: int, high: int) -> int | None:
    """An ASCII decimal integer within [low, high], else None (pure; never raises)."""
    if text is None or not _DECIMAL.fullmatch(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


@dataclass(frozen=True)
class Target:
    """What a case acts on. Identity is (node, boot id, pid, start ticks, gpu uuid): start
    ticks since boot do not move when the wall clock steps, and the boot id tells a PID of
    this boot from the same number of an earlier one. `start_time` is for humans."""

    node: str
    pid: int
    start_ticks: int
    boot_id: str
    uuid: str
    start_time: float = 0.0

    @property
    def key(self) -> tuple[str, str, int, int, str]:
        """The one rule for "same process": dedup and the identity check both use it."""
        return (self.node, self.boot_id, self.pid, self.start_ticks, self.uuid)


@dataclass(frozen=True)
class Member:
    """One process of a target's tree, pinned by its start ticks."""

    pid: int
    start_ticks: int
    uid: int | None = None


@dataclass(frozen=True)
class OwnerPresence:
    """What the node saw of the owner (exporter/presence.py): login sessions, the idle time of
    the latest used terminal, connections to the notebook server the process runs under
    (its kernel's server; None: unreadable)."""

    sessions: int = 0
    idle_seconds: float | None = None
    terminal: str = ""
    notebook_connections: int | None = None

    def on_terminal(self, within: float) -> bool:
        """Logged in, with a terminal that saw input within `within` seconds."""
        return bool(self.sessions) and self.idle_seconds is not None and self.idle_seconds <= within

    def present(self, terminal_within: float) -> str | None:
        """What shows the owner present, in words, or None (absent, or unknown)."""
        seen = []
        if self.on_terminal(terminal_within):
            idle = format_duration(self.idle_seconds or 0.0)
            seen.append(f"logged in on {self.terminal}, idle {idle}")
        if self.notebook_connections:
            seen.append(f"{self.notebook_connections} connection(s) to its notebook server")
        return "; ".join(seen) or None


@dataclass(frozen=True)
class Excluded:
    """A process of the target's tree that is never signalled, and why."""

    pid: int
    reason: str


@dataclass(frozen=True)
class SignalResult:
    pid: int
    signal: str
    sent: bool
    detail: str = ""


# The environment variable an owner starts a process with to ask not to be judged idle
# before that much runtime (`GPU_RECLAIMER_KEEP=4h python eval.py`), within the rule's
# [keep_min, keep_max]; read from the node, never from an alert.
KEEP_VARIABLE = "GPU_RECLAIMER_KEEP"


@dataclass(frozen=True)
class LiveState:
    """What a re-check saw; None means unknown (never treated as idle)."""

    sampled_at: float
    exists: bool
    start_ticks: int | None = None
    boot_id: str | None = None
    start_time: float | None = None  # wall clock, for humans
    uid: int | None = None
    user: str | None = None
    groups: tuple[str, ...] = ()
    namespace: str = ""  # from the node: the kubelet's pod, never from the alert
    pod: str = ""  # the pod's name, from the kubelet ("" when it cannot name it)
    pod_uid: str = ""  # from the cgroup path: the process runs in a pod
    pod_container: str = ""  # the container's name in the pod
    slurm_job: str = ""  # from the node (exporter/slurm.py), never from the alert
    project: str = ""  # from the node's project mapping, never from the alert
    command: str = ""  # the names protection matches (comm, exe, argv[0], module)
    program: str = ""  # what runs, named as the exporter's `command` label names it
    cmdline: str = ""  # the whole command line, as /proc says (untrusted: the user wrote it)
    protected: str | None = None
    gpu_found: bool | None = None
    gpu_index: int | None = None  # the target's GPU as NVML numbers it now
    gpu_model: str = ""
    on_gpu: bool | None = None  # the target itself is listed on the GPU
    gpu_memory_bytes: int | None = None  # held by the target and its signalled members
    sm_util: float | None = None
    util_unknown: str = ""  # why sm_util is None, when it is
    cpu_seconds: float | None = None
    log_mtime: float | None = None
    heartbeat: float | None = None
    # An owner's ask not to be judged idle before that much runtime, as "WHERE=VALUE": the
    # environment's GPU_RECLAIMER_KEEP=4h, or the pod's gpu-reclaimer.io/keep=4h annotation.
    keep_asked: str | None = None
    # The GPU's board power now, shared by the memory each process on it holds (as the
    # rules' gpu_process:power_share_watts); None where the driver reports no power.
    power_share_watts: float | None = None
    # The tree's TCP sockets (exporter/netactivity.py): listeners that may serve (None: not
    # read), every listening port, data last moved beyond keep-alive (None: not since).
    listening_external: int | None = None
    listen_ports: tuple[int, ...] = ()
    network_activity: float | None = None
    network_unknown: str = ""  # why the sockets could not be read ("" when they were)
    listening_rendezvous: int = 0  # the job's own listeners (bound to 0, MASTER_PORT, ...)
    network_clients: int = 0  # connections accepted on its serving listeners, open now
    # Durations on the node's monotonic clock (no wall-clock step moves them): since a client
    # was last seen (None: never), and how long the node's meter has read the tree.
    client_ago: float | None = None
    network_watched_for: float | None = None
    # Watched for a whole window: quiet can be told from unknown (None: not read, or an
    # agent that does not say; both unknown).
    network_covered: bool | None = None
    # The GPU's used memory now (all processes), the driver's checkpoint state of the
    # process ("" where the node cannot checkpoint), and the host memory available for a
    # checkpoint (the lesser of the node's and the process's cgroup's; None: unknown).
    gpu_used_bytes: int | None = None
    checkpoint_state: str = ""
    host_memory_available: int | None = None
    mps_on_gpu: bool | None = None  # an MPS server on its GPU: no checkpoint (None: not read)
    # The owner's presence on the node (None: not read; absence and unknown are the same).
    presence: OwnerPresence | None = None
    members: tuple[Member, ...] = ()
    excluded: tuple[Excluded, ...] = ()
    errors: tuple[str, ...] = ()
    # This actuator's clock minus the node's, as applied to its readings (0 on this node). It
    # carries each call's latency: two readings of a node compare on its clock (on_node_clock).
    clock_offset: float = 0.0

    def on_node_clock(self, ts: float) -> float:
        """One of this reading's timestamps as the node's clock read it."""
        return ts - self.clock_offset

    @property
    def last_activity(self) -> float | None:
        """Latest heartbeat or log write; None when the process has neither."""
        stamps = [t for t in (self.log_mtime, self.heartbeat) if t is not None]
        return max(stamps) if stamps else None

    def evidence(self) -> dict[str, Any]:
        return {
            "exists": self.exists,
            "start_ticks": self.start_ticks,
            "boot_id": self.boot_id,
            "start_time": self.start_time,
            "uid": self.uid,
            "user": self.user,
            "namespace": self.namespace,
            "pod": self.pod or None,
            "pod_uid": self.pod_uid or None,
            "slurm_job": self.slurm_job or None,
            "project": self.project,
            "command": self.command,
            "program": self.program,
            "cmdline": self.cmdline,
            "protected": self.protected,
            "gpu_index": self.gpu_index,
            "on_gpu": self.on_gpu,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "sm_util": self.sm_util,
            "util_unknown": self.util_unknown or None,
            "cpu_seconds": self.cpu_seconds,
            "log_mtime": self.log_mtime,
            "heartbeat": self.heartbeat,
            "listening_external": self.listening_external,
            "listen_ports": list(self.listen_ports),
            "network_activity": self.network_activity,
            "network_unknown": self.network_unknown or None,
            "listening_rendezvous": self.listening_rendezvous,
            "network_clients": self.network_clients,
            "client_ago": self.client_ago,
            "network_watched_for": self.network_watched_for,
            "network_covered": self.network_covered,
            "keep_asked": self.keep_asked,
            "gpu_used_bytes": self.gpu_used_bytes,
            "checkpoint_state": self.checkpoint_state or None,
            "host_memory_available": self.host_memory_available,
            "mps_on_gpu": self.mps_on_gpu,
            "presence": asdict(self.presence) if self.presence else None,
            "power_share_watts": self.power_share_watts,
            "members": [m.pid for m in self.members],
            "excluded": [e.__dict__ for e in self.excluded],
            "errors": list(self.errors),
        }


def parse_target(
    labels: dict[str, str], annotations: dict[str, str], *, pid_max: int = PID_MAX_LIMIT
) -> Target | str:
    """The target named by an alert, or the reason it names none (pure; never raises)."""

    def get(key: str) -> str | None:
        return labels.get(key) or annotations.get(key) or None

    node, uuid = get("node"), get("uuid")
    pid_text, ticks_text, boot = get("pid"), get("start_ticks"), get("boot_id")
    start_text = get("start_time") or get("process_start_time")
    if not node or len(node) > 253:
        return "alert has no valid node label"
    if not uuid or not _UUID.fullmatch(uuid):
        return f"alert has no valid uuid label: {_shown(uuid)}"
    pid = parse_decimal(pid_text, 2, pid_max - 1)
    if pid is None:
        return f"alert has no valid pid label (ASCII decimal, 2..{pid_max - 1}): {_shown(pid_text)}"
    ticks = parse_decimal(ticks_text, 1, MAX_START_TICKS)
    if ticks is None:
        return (
            f"alert has no valid start_ticks label: {_shown(ticks_text)} (the rules must join "
            "gpu_process_info's start_ticks and boot_id)"
        )
    if not boot or not _BOOT_ID.fullmatch(boot):
        return f"alert has no valid boot_id label: {_shown(boot)}"
    start_time = 0.0
    if start_text is not None:
        try:
            start_time = float(start_text)
        except ValueError:
            return f"alert start_time is not a number: {_shown(start_text)}"
        if not math.isfinite(start_time) or start_time <= 0:
            return f"alert start_time is not a timestamp: {_shown(start_text)}"
    return Target(node, pid, ticks, boot, uuid, start_time)


def parse_uid_label(text: str | None) -> int | str | None:
    """None when absent, the uid, or a reason string when present but invalid."""
    if text is None or text == "":
        return None
    uid = parse_decimal(text, 0, MAX_UID)
    return (
        uid if uid is not None else f"alert uid label is not a uid (0..{MAX_UID}): {_shown(text)}"
    )


def _shown(text: str | None) -> str:
    return repr(text[:64]) if text is not None else "missing"


@dataclass
class Case:
    """A durable reclaim case (one row of the `cases` table)."""

    id: int
    state: State
    version: int
    node: str
    pid: int
    start_time: float
    uuid: str
    start_ticks: int
    boot_id: str
    alertname: str
    fingerprint: str
    starts_ts: float
    labels: dict[str, str]
    annotations: dict[str, str]
    created: float
    updated: float
    reason: str = ""
    reason_code: str = ""
    user: str | None = None
    uid: int | None = None
    project: str | None = None
    rule: str | None = None
    mode: str | None = None
    notified_at: float | None = None
    term_at: float | None = None
    kill_at: float | None = None
    exited_at: float | None = None
    ended_at: float | None = None
    snoozed_until: float | None = None
    cpu_seconds: float | None = None
    cpu_at: float | None = None
    cpu_rate: float | None = None
    effective: dict[str, Any] | None = None
    gpu_memory_bytes: int | None = None
    freed_bytes: int = 0
    members: list[Member] = field(default_factory=list)
    # Waits on the boot-time clock (actuator/clock.py); the *_at fields above: wall time.
    created_mono: float = 0.0
    clock: str = ""  # the domain of the *_mono values (Database.clock_id)
    notified_mono: float | None = None
    term_mono: float | None = None
    kill_mono: float | None = None
    exited_mono: float | None = None
    snoozed_until_mono: float | None = None
    ended_mono: float | None = None
    deferred_from: str | None = None  # the state a deferred case returns to
    notice_attempts: int = 0
    next_notice_mono: float | None = None
    notice_extra_grace: float = 0.0  # added to the grace after an undelivered notice
    rearmed_from: int | None = None  # the activity-cancelled case this one re-arms
    followup: int | None = None  # the case that re-armed this one
    release_requested_mono: float | None = None  # the owner chose "release now"
    # The suspend rung: when it was asked (wall, boot clock), when the node proved the
    # checkpoint, the GPU's used memory before it, and the owner's ask to have it back
    # (with the keep that follows the restore).
    suspend_at: float | None = None
    suspend_mono: float | None = None
    suspended_mono: float | None = None
    gpu_used_before: int | None = None
    resume_requested_mono: float | None = None
    resume_keep: float = 0.0
    restore_attempts: int = 0  # restores the driver refused
    restore_waits: int = 0  # resumes not tried for want of room, and why the last was not
    restore_room: str = ""
    restored_onto: str = ""  # the GPU a restore moved it to (its UUID): its target's from then
    unreachable_since_mono: float | None = None  # the node's agent has not answered since
    slurm_job: str | None = None  # reclaimed as this Slurm job, through the scheduler
    pod: dict[str, str] | None = None  # reclaimed as this pod (namespace, name, uid), via the API
    owner: dict[str, str] | None = None  # who the workload names (a pod's owner annotation)
    facts: dict[str, Any] | None = None  # what the node proved of the target (ProvenFacts)
    # reclaim_when: demand: the request this case is reclaimed for, and since when (the
    # grace runs from demand_mono); None while nobody waits for its GPU
    demand_for: str | None = None  # Request.ref
    demand_who: str | None = None  # Request.who, for people
    demand_at: float | None = None
    demand_mono: float | None = None

    @property
    def idle_since(self) -> float:
        """Wall time idleness counts from: the alert's startsAt, never before this actuator
        first saw the alert (the case opened) nor before the process started (the node's
        start time replaces the alert's at the first re-check). The sender writes startsAt:
        it can make a duration later, never earlier."""
        return max(self.starts_ts, self.created, self.start_time)

    @property
    def target(self) -> Target:
        gpu = self.restored_onto or self.uuid  # a restore may have moved it to another GPU
        return Target(self.node, self.pid, self.start_ticks, self.boot_id, gpu, self.start_time)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": str(self.state),
            "reason": self.reason,
            "reason_code": self.reason_code,
            "alertname": self.alertname,
            "fingerprint": self.fingerprint,
            "starts_at": self.starts_ts,
            "target": {
                "node": self.node,
                "pid": self.pid,
                "start_time": self.start_time,
                "start_ticks": self.start_ticks,
                "boot_id": self.boot_id,
                "uuid": self.uuid,
            },
            "user": self.user,
            "uid": self.uid,
            "project": self.project,
            "rule": self.rule,
            "mode": self.mode,
            "created": self.created,
            "updated": self.updated,
            "notified_at": self.notified_at,
            "term_at": self.term_at,
            "kill_at": self.kill_at,
            "ended_at": self.ended_at,
            "snoozed_until": self.snoozed_until,
            "demand": {"for": self.demand_for, "who": self.demand_who, "since": self.demand_at}
            if self.demand_for
            else None,
            "deferred_from": self.deferred_from,
            "notice_attempts": self.notice_attempts,
            "rearmed_from": self.rearmed_from,
            "followup": self.followup,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "freed_bytes": self.freed_bytes,
            "members": [m.__dict__ for m in self.members],
            "labels": self.labels,
        }


class _Unset(Enum):
    UNSET = "unset"


UNSET = _Unset.UNSET


@dataclass(frozen=True)
class CaseUpdate:
    """The fields a decision may change on its case, typed; UNSET ones stay as they are."""

    cpu_seconds: float | _Unset | None = UNSET
    cpu_at: float | _Unset | None = UNSET
    cpu_rate: float | _Unset | None = UNSET
    gpu_memory_bytes: int | _Unset | None = UNSET
    uid: int | _Unset | None = UNSET
    start_time: float | _Unset = UNSET
    notified_at: float | _Unset | None = UNSET
    notified_mono: float | _Unset | None = UNSET
    notice_attempts: int | _Unset = UNSET
    next_notice_mono: float | _Unset | None = UNSET
    notice_extra_grace: float | _Unset = UNSET
    deferred_from: str | _Unset | None = UNSET
    exited_at: float | _Unset | None = UNSET
    exited_mono: float | _Unset | None = UNSET
    freed_bytes: int | _Unset = UNSET
    unreachable_since_mono: float | _Unset | None = UNSET
    snoozed_until: float | _Unset | None = UNSET
    snoozed_until_mono: float | _Unset | None = UNSET
    demand_for: str | _Unset | None = UNSET
    demand_who: str | _Unset | None = UNSET
    demand_at: float | _Unset | None = UNSET
    demand_mono: float | _Unset | None = UNSET
    # What a state change records: the proven facts, the rule, the signal's moment and
    # tree, and who carries it out (a scheduler's claim) or is told (a workload's owner).
    user: str | _Unset | None = UNSET
    project: str | _Unset | None = UNSET
    facts: dict[str, Any] | _Unset | None = UNSET
    rule: str | _Unset | None = UNSET
    mode: str | _Unset | None = UNSET
    effective: dict[str, Any] | _Unset | None = UNSET
    term_at: float | _Unset | None = UNSET
    term_mono: float | _Unset | None = UNSET
    kill_at: float | _Unset | None = UNSET
    kill_mono: float | _Unset | None = UNSET
    members: list[Member] | _Unset = UNSET
    slurm_job: str | _Unset | None = UNSET
    pod: dict[str, str] | _Unset | None = UNSET
    owner: dict[str, str] | _Unset | None = UNSET
    suspend_at: float | _Unset | None = UNSET
    suspend_mono: float | _Unset | None = UNSET
    suspended_mono: float | _Unset | None = UNSET
    gpu_used_before: int | _Unset | None = UNSET
    resume_requested_mono: float | _Unset | None = UNSET
    resume_keep: float | _Unset = UNSET
    restore_attempts: int | _Unset = UNSET
    restore_waits: int | _Unset = UNSET
    restore_room: str | _Unset = UNSET
    restored_onto: str | _Unset = UNSET

    def changed(self) -> dict[str, Any]:
        return {
            f.name: value for f in fields(self) if (value := getattr(self, f.name)) is not UNSET
        }

    def __bool__(self) -> bool:
        return bool(self.changed())

    def then(self, later: CaseUpdate) -> CaseUpdate:
        """This update followed by `later` (later's fields win)."""
        return replace(self, **later.changed())

    def apply_to(self, case: Case) -> None:
        for name, value in self.changed().items():
            setattr(case, name, value)
