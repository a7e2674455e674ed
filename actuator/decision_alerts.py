"""The actuator's own alerts, posted to Alertmanager's API (`POST /api/v2/alerts`), so chat is
routed on decisions rather than on the raw rule alerts:

- `GpuReclaimScheduled` (info): the owner was warned; the reclaim is due at `deadline`;
- `GpuProcessReclaimed` (info): the process tree exited and its memory was freed;
- `GpuHandedOff` (info): a GPU reclaimed for a waiting request is free; names who waits;
- `GpuReclaimFailed` (warning): signalled, but the memory was not freed;
- `GpuReclaimerCircuitBreakerOpen` (critical): enforcement paused; re-sent while open,
  resolved when it closes.

Labels are what SREs route on: user, project, node, gpu, severity, case, case_url; the
runbook is an absolute link. Posting is best effort (bounded timeout, every configured
Alertmanager tried, failures counted); it never holds a decision back.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from actuator.endpoints import Endpoint, EndpointError
from actuator.models import Case
from actuator.notifications import untrusted
from actuator.notifications.notice import Notice, ProvenFacts

log = logging.getLogger(__name__)
HOLD_S = 3600.0  # how long an info alert stays active in Alertmanager
BREAKER_RESEND_S = 60.0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


class DecisionAlerts:
    def __init__(
        self,
        urls: Sequence[str],
        *,
        external_url: str = "",
        runbook_url: str = "",
        timeout: float = 5.0,
        clock: Callable[[], float],
    ) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.external_url, self.runbook_url = external_url.rstrip("/"), runbook_url
        self.timeout, self.clock = timeout, clock
        self.endpoints = {u: Endpoint(u) for u in self.urls}
        self.failures = 0
        self._breaker_sent: float | None = None
        self._breaker_open = False
        # Inside `batched()` (a reconciler pass), case alerts wait here and leave as one
        # list per pass: one POST per Alertmanager, not one per decision.
        self._lock = threading.Lock()
        self._batching = 0
        self._pending: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Case alerts raised meanwhile (from any thread) are posted together at the end."""
        with self._lock:
            self._batching += 1
        try:
            yield
        finally:
            pending: list[dict[str, Any]] = []
            with self._lock:
                self._batching -= 1
                if self._batching == 0:
                    pending, self._pending = self._pending, []
            if pending:
                self.post(pending)

    def _send(self, alert: dict[str, Any]) -> bool:
        """Now, or with the pass's others when inside `batched()` (True: queued)."""
        with self._lock:
            if self._batching:
                self._pending.append(alert)
                return True
        return self.post([alert])

    def post(self, alerts: list[dict[str, Any]]) -> bool:
        """To every Alertmanager (an HA pair deduplicates); True when one accepted."""
        accepted = False
        for url in self.urls:
            try:
                r = self.endpoints[url].post_json(
                    f"{url}/api/v2/alerts", alerts, timeout=self.timeout
                )
                accepted |= r.status == 200
                if r.status != 200:
                    log.warning("alertmanager %s: HTTP %s %s", url, r.status, r.text[:200])
            except EndpointError as exc:
                log.warning("alertmanager %s: %s", url, exc)
        if not accepted:
            self.failures += 1
        return accepted

    def _case_alert(
        self, name: str, severity: str, case: Case, summary: str, ends: float, **extra: str
    ) -> dict[str, Any]:
        """Labels and annotations from the facts the node proved, each cleaned: chat
        templates downstream render them, and a user chose the command line."""
        now = self.clock()
        facts = ProvenFacts.of_case(case)
        labels = {
            "alertname": name,
            "severity": severity,
            "node": case.node,
            "gpu": facts.gpu if facts else "",
            "user": case.user or "",
            "project": facts.project if facts else "",
            "case": str(case.id),
            "pid": str(case.pid),
        }
        annotations = {"summary": summary, **extra}
        if self.external_url:
            labels["case_url"] = f"{self.external_url}/api/v1/cases/{case.id}"
        if self.runbook_url:
            annotations["runbook_url"] = self.runbook_url

        def safe(key: str, value: str, limit: int) -> str:  # our own links stay links
            return value if key.endswith("_url") else untrusted.label(value, limit)

        return {
            "labels": {k: safe(k, v, 200) for k, v in labels.items() if v},
            "annotations": {k: safe(k, v, 500) for k, v in annotations.items()},
            "startsAt": _iso(now),
            "endsAt": _iso(ends),
            "generatorURL": labels.get("case_url", ""),
        }

    def scheduled(self, notice: Notice, case: Case) -> bool:
        f, deadline = notice.facts, notice.deadline
        return self._send(
            self._case_alert(
                "GpuReclaimScheduled",
                "info",
                case,
                f"{notice.user or '?'}'s {f.program or 'process'} (PID {f.pid}) on {f.node} "
                f"GPU {f.gpu} will be reclaimed at {_iso(deadline)} unless kept",
                deadline + HOLD_S,
                deadline=_iso(deadline),
            )
        )

    def reclaimed(self, case: Case) -> bool:
        return self._send(
            self._case_alert(
                "GpuProcessReclaimed",
                "info",
                case,
                f"{case.user or '?'}'s PID {case.pid} on {case.node} was reclaimed: "
                f"{case.freed_bytes / 2**30:.1f} GiB freed",
                self.clock() + HOLD_S,
            )
        )

    def handed_off(self, case: Case) -> bool:
        """The GPU reclaimed for a waiting request is held by that request's own process
        (proven by the demand planner): chat says who it went to."""
        return self._send(
            self._case_alert(
                "GpuHandedOff",
                "info",
                case,
                f"GPU {case.uuid} on {case.node} was handed off to {case.demand_who or '?'}",
                self.clock() + HOLD_S,
                waiting_for=case.demand_for or "",
            )
        )

    def failed(self, case: Case) -> bool:
        return self._send(
            self._case_alert(
                "GpuReclaimFailed",
                "warning",
                case,
                f"PID {case.pid} on {case.node} was signalled but its GPU memory was not "
                f"freed: {case.reason}",
                self.clock() + HOLD_S,
            )
        )

    def breaker(self, is_open: bool, reason: str, mono: float) -> None:
        """Called every pass: firing (re-sent each minute) while open, resolved once closed."""
        if not is_open and not self._breaker_open:
            return
        if (
            is_open
            and self._breaker_sent is not None
            and mono - self._breaker_sent < BREAKER_RESEND_S
        ):
            return
        now = self.clock()
        summary = f"enforcement paused: {reason}" if is_open else "the circuit breaker was reset"
        annotations = {"summary": summary}
        if self.runbook_url:
            annotations["runbook_url"] = self.runbook_url
        alert = {
            "labels": {"alertname": "GpuReclaimerCircuitBreakerOpen", "severity": "critical"},
            "annotations": annotations,
            "startsAt": _iso(now),
            "endsAt": _iso(now + 5 * BREAKER_RESEND_S if is_open else now),
        }
        if self.post([alert]):
            self._breaker_sent = mono if is_open else None
            self._breaker_open = is_open
