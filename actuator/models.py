"""Alertmanager webhook payloads (version 4) and the actuator's own records."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

MAX_ALERTS = 10_000
RECLAIMABLE_LABEL = ("reclaim", "true")


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


class AlertmanagerPayload(BaseModel):
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
    alerts: list[AlertmanagerAlert] = Field(max_length=MAX_ALERTS)


def epoch(ts: datetime) -> float:
    return ts.astimezone(UTC).timestamp()


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


LIVE_STATES = frozenset(
    {State.PENDING, State.NOTIFIED, State.TERMINATING, State.KILLING, State.SNOOZED}
)
SIGNALLED_STATES = frozenset({State.TERMINATING, State.KILLING})


@dataclass(frozen=True)
class Target:
    """What a case acts on: (node, pid, process start time, gpu uuid)."""

    node: str
    pid: int
    start_time: float
    uuid: str


@dataclass(frozen=True)
class Member:
    """One process of a target's tree, pinned by its start time."""

    pid: int
    start_time: float
    uid: int | None = None


def parse_target(labels: dict[str, str], annotations: dict[str, str]) -> Target | str:
    """The target named by an alert, or the reason it names none (pure)."""

    def get(key: str) -> str | None:
        return labels.get(key) or annotations.get(key) or None

    node, pid_text, uuid = get("node"), get("pid"), get("uuid")
    start_text = get("start_time") or get("process_start_time")
    if not node:
        return "alert has no node label"
    if not uuid:
        return "alert has no uuid label"
    if not pid_text or not pid_text.isdigit() or not 1 <= int(pid_text) < 2**22:
        return f"alert has no valid pid label: {pid_text!r}"
    if not start_text:
        return "alert has no start_time (label or annotation)"
    try:
        start_time = float(start_text)
    except ValueError:
        return f"alert start_time is not a number: {start_text!r}"
    if not math.isfinite(start_time) or start_time <= 0:
        return f"alert start_time is not a timestamp: {start_text!r}"
    return Target(node=node, pid=int(pid_text), start_time=start_time, uuid=uuid)


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

    @property
    def target(self) -> Target:
        return Target(self.node, self.pid, self.start_time, self.uuid)

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
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "freed_bytes": self.freed_bytes,
            "members": [m.__dict__ for m in self.members],
            "labels": self.labels,
        }
