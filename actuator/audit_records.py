"""One frozen dataclass per audit event: what each line of the audit log says.

The audit log's writer takes these and nothing else, so renaming a field is a type error
at every site that builds the record, not a silent break in a reader. Each record's JSON is
its fields by name (a field may name its JSON key, `from` being a keyword), led by its
`event`; a field that defaults to None leaves its key out while it is None, as the log
always has (a field that may be None but has no default always states it). Readers of the
log compare `Event` members; the evidence a step stores on its case's timeline is read back
as a `decision_record.StepEvidence`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from actuator.audit import Event


@dataclass(frozen=True, kw_only=True)
class Record:
    event: ClassVar[Event]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.event}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue  # an optional field: its key is left out while it is None
            out[f.metadata.get("key", f.name)] = value
        return out


# -- decisions ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DecisionMade(Record):
    """A case created, re-armed or moved by a step (actuator/decision_record.py builds it)."""

    event = Event.DECISION
    decision_id: str
    case: int | None
    from_state: str | None = field(metadata={"key": "from"})
    to: str | None
    action: str
    reason: str
    node: str
    pid: int
    start_time: float
    start_ticks: int
    boot_id: str
    uid: int | None
    uuid: str
    user: str | None
    alertname: str
    alert: dict[str, Any]
    mode: str | None
    rule: str | None
    decided_at: float
    timings: dict[str, Any]
    code: str | None = None
    rearmed_from: int | None = None
    live: dict[str, Any] | None = None
    thresholds: dict[str, Any] | None = None
    alert_disagrees: dict[str, dict[str, str]] | None = None


@dataclass(frozen=True, kw_only=True)
class DecisionAborted(Record):
    event = Event.DECISION_ABORTED
    case: int
    decision_id: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class StepError(Record):
    event = Event.STEP_ERROR
    case: int
    state: str
    error: str


# -- what was done -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NoticeSent(Record):
    """A notice's outcome: the first notice (its attempt, whether the grace started) or,
    under demand, the second (what it waits for, when SIGTERM follows)."""

    event = Event.NOTICE
    case: int
    delivered: bool
    detail: str
    attempt: int | None = None
    grace_started: bool | None = None
    kind: str | None = None
    demand: str | None = None
    sigterm_at: float | None = None


@dataclass(frozen=True, kw_only=True)
class FollowupSent(Record):
    event = Event.FOLLOWUP
    case: int
    delivered: bool
    detail: str


@dataclass(frozen=True, kw_only=True)
class SignalsSent(Record):
    event = Event.SIGNALS
    case: int
    signal: str
    results: list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class CheckpointCalled(Record):
    """A checkpoint call the node made (SUSPEND: lock and checkpoint; RESUME: restore and
    unlock), as the node answered: what it proves is judged at the next step."""

    event = Event.CHECKPOINT
    case: int
    call: str
    ok: bool
    state: str
    detail: str


@dataclass(frozen=True, kw_only=True)
class FreedForRequest(Record):
    event = Event.FREED_FOR_REQUEST
    case: int
    request: str | None
    who: str | None
    seconds_from_demand: float


@dataclass(frozen=True, kw_only=True)
class KubeReclaim(Record):
    event = Event.KUBE_RECLAIM
    pod: dict[str, str]
    step: str
    case: int | None = None
    ok: bool | None = None
    detail: str | None = None


@dataclass(frozen=True, kw_only=True)
class KubeVerified(Record):
    event = Event.KUBE_VERIFIED
    pod: dict[str, str]
    state: str
    case: int | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class SlurmCancel(Record):
    event = Event.SLURM_CANCEL
    job: str | None
    signal: str | None  # None: scancel's own way of ending the job
    dry_run: bool | None = None
    case: int | None = None
    ok: bool | None = None
    detail: str | None = None


@dataclass(frozen=True, kw_only=True)
class SlurmVerified(Record):
    event = Event.SLURM_VERIFIED
    job: str
    state: str
    gpus_allocated: dict[str, Any] | None = None
    error: str | None = None
    case: int | None = None


# -- demand ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DemandSourceChanged(Record):
    event = Event.DEMAND_SOURCE
    source: str
    up: bool
    error: str | None


@dataclass(frozen=True, kw_only=True)
class _NextHolder(Record):
    """Who took a GPU reclaimed for demand, and when."""

    case: int
    node: str
    uuid: str
    trigger: str
    request: str | None
    holders: list[int]
    seconds: float
    why: str | None = None


@dataclass(frozen=True, kw_only=True)
class GpuTaken(_NextHolder):
    event = Event.GPU_TAKEN


@dataclass(frozen=True, kw_only=True)
class NeedlessReclaim(_NextHolder):
    """Not taken by whoever it was reclaimed for (or by nobody within the window)."""

    event = Event.NEEDLESS_RECLAIM


@dataclass(frozen=True, kw_only=True)
class HandedOff(Record):
    event = Event.HANDED_OFF
    case: int
    request: str | None
    who: str | None
    holders: list[int]
    seconds: float


@dataclass(frozen=True, kw_only=True)
class WaitJoined(Record):
    event = Event.WAIT
    uid: int
    pid: int
    gpus: int
    memory: int
    until: float


@dataclass(frozen=True, kw_only=True)
class WaitServed(Record):
    event = Event.WAIT_SERVED
    waiter: int
    uid: int
    gpus: list[str]


# -- people and operators ----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Snoozed(Record):
    """An operator's snooze, or an owner's keep ended now (duration 0)."""

    event = Event.SNOOZE
    case: int
    until: float
    duration: float
    by: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class KeptAhead(Record):
    event = Event.KEEP_AHEAD
    uid: int
    pid: int
    start_ticks: int
    until: float
    by: str
    rule: str | None


@dataclass(frozen=True, kw_only=True)
class KeepRevoked(Record):
    event = Event.KEEP_REVOKED
    uid: int
    pid: int
    keep: int
    by: str


@dataclass(frozen=True, kw_only=True)
class KeepLinkUsed(Record):
    event = Event.KEEP_LINK
    case: int
    action: str
    hours: float | None
    link: str
    owner: str | None


@dataclass(frozen=True, kw_only=True)
class KeepSocketAsked(Record):
    event = Event.KEEP_SOCKET
    uid: int
    pid: int | None
    action: str
    case: int | None
    result: str


@dataclass(frozen=True, kw_only=True)
class AuthFailed(Record):
    event = Event.AUTH_FAILED
    reason: str
    path: str
    method: str
    remote: str | None


@dataclass(frozen=True, kw_only=True)
class AlertRejected(Record):
    event = Event.ALERT_REJECTED
    fingerprint: str | None
    group: str
    errors: list[str]


@dataclass(frozen=True, kw_only=True)
class AlertDuplicate(Record):
    event = Event.ALERT_DUPLICATE
    fingerprint: str
    starts_at: str
    deliveries: int


@dataclass(frozen=True, kw_only=True)
class BreakerOpened(Record):
    event = Event.BREAKER_OPEN
    node: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class BreakerReset(Record):
    event = Event.BREAKER_RESET
    was_open: bool
    opened_reason: str
    by: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class RepeatReset(Record):
    event = Event.REPEAT_RESET
    user: str
    had: int
    by: str
    reason: str
