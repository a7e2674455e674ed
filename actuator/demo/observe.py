"""What each part of the loop sees right now, read through its own API:

- the exporter's /metrics: memory per GPU and per process (what NVML reports),
- Prometheus's /api/v1/alerts: which processes are pending or firing,
- the actuator's /api/v1/cases (+ one case's signals): what it decided and did,
- the audit log: the decisions, in order.

A part that does not answer is reported in `errors`, never guessed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from actuator.demo.stack import Stack
from actuator.ladder import SIGNALLED_STATES
from actuator.models import ENDED_STATES, State

TERMINAL_STATES = frozenset(str(s) for s in ENDED_STATES)
# States a case can only be in after a signal was sent.
EVER_SIGNALLED_STATES = frozenset(
    str(s) for s in SIGNALLED_STATES | {State.RECLAIMED, State.FAILED}
)


@dataclass(frozen=True)
class GpuMemory:
    index: str
    used: int
    total: int


@dataclass
class Snapshot:
    at: float
    alerts: list[dict[str, Any]] = field(default_factory=list)
    cases: list[dict[str, Any]] = field(default_factory=list)  # newest first
    signals: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # by case id
    gpus: list[GpuMemory] = field(default_factory=list)
    process_memory: dict[int, int] = field(default_factory=dict)  # pid -> bytes (exporter)
    nvml_up: bool | None = None
    events: list[dict[str, Any]] = field(default_factory=list)  # audit decisions, oldest first
    chat_posts: int = 0
    notices: int = 0
    errors: list[str] = field(default_factory=list)

    def alert_for(self, pid: int) -> tuple[str, str] | None:
        """(alertname, state) of the process's alert; firing wins over pending."""
        found = [
            (a["labels"].get("alertname", "?"), a.get("state", "?"))
            for a in self.alerts
            if a["labels"].get("pid") == str(pid)
        ]
        found.sort(key=lambda item: item[1] != "firing")
        return found[0] if found else None

    def cases_for(self, pid: int) -> list[dict[str, Any]]:
        return [c for c in self.cases if c["target"]["pid"] == pid]

    def signals_for(self, pid: int) -> list[str]:
        """Signal names sent to the process's tree, over all its cases, in order."""
        sent: list[dict[str, Any]] = []
        for case in self.cases_for(pid):
            sent += self.signals.get(case["id"], [])
        return [s["signal"] for s in sorted(sent, key=lambda s: s["ts"])]


class Observer:
    """Polls the parts of one stack; keeps the details of finished cases (they never change)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self._final_signals: dict[int, list[dict[str, Any]]] = {}

    def snapshot(self, events: int = 8) -> Snapshot:
        snap = Snapshot(at=time.time())
        self._exporter(snap)
        self._prometheus(snap)
        self._actuator(snap)
        snap.events = self._audit_events(events)
        snap.chat_posts = len(self.stack.sink.posts("/chat"))
        snap.notices = len(self.stack.sink.posts("/notice"))
        return snap

    def _exporter(self, snap: Snapshot) -> None:
        try:
            text = requests.get(self.stack.url("exporter") + "/metrics", timeout=3).text
        except requests.RequestException as exc:
            snap.errors.append(f"exporter: {type(exc).__name__}")
            return
        used: dict[str, int] = {}
        total: dict[str, int] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = sample.labels
                if sample.name == "gpu_memory_used_bytes":
                    used[labels["gpu"]] = int(sample.value)
                elif sample.name == "gpu_memory_total_bytes":
                    total[labels["gpu"]] = int(sample.value)
                elif sample.name == "gpu_process_memory_used_bytes":
                    pid = int(labels["pid"])
                    snap.process_memory[pid] = snap.process_memory.get(pid, 0) + int(sample.value)
                elif sample.name == "gpu_exporter_nvml_up":
                    snap.nvml_up = sample.value == 1
        snap.gpus = [GpuMemory(i, used[i], total.get(i, 0)) for i in sorted(used, key=int)]

    def _prometheus(self, snap: Snapshot) -> None:
        try:
            snap.alerts = list(self.stack.prometheus_api("/api/v1/alerts")["alerts"])
        except (requests.RequestException, ValueError) as exc:
            snap.errors.append(f"prometheus: {type(exc).__name__}")

    def _actuator(self, snap: Snapshot) -> None:
        try:
            snap.cases = list(self.stack.actuator_api("/api/v1/cases", limit=1000)["cases"])
            for case in snap.cases:
                if case.get("term_at") is None:
                    continue  # never signalled: nothing to fetch
                case_id = int(case["id"])
                if case_id in self._final_signals:
                    snap.signals[case_id] = self._final_signals[case_id]
                    continue
                detail = self.stack.actuator_api(f"/api/v1/cases/{case_id}")
                snap.signals[case_id] = list(detail.get("signals", []))
                if detail["state"] in TERMINAL_STATES:
                    self._final_signals[case_id] = snap.signals[case_id]
        except (requests.RequestException, ValueError) as exc:
            snap.errors.append(f"actuator: {type(exc).__name__}")

    def _audit_events(self, limit: int) -> list[dict[str, Any]]:
        """The last `limit` decision records of the audit log (a local file in the demo)."""
        records: list[dict[str, Any]] = []
        try:
            with self.stack.audit_log.open("rb") as fh:
                for raw in fh:
                    try:
                        record = json.loads(raw)
                    except ValueError:
                        continue
                    if record.get("event") in ("decision", "signals"):
                        records.append(record)
        except OSError:
            return []
        return records[-limit:]
