"""/metrics computed from SQLite at scrape time, so every gunicorn worker answers the same."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from actuator.ladder import SIGNAL_NAMES
from actuator.models import HOLDS, REFUSALS, Reason, State
from actuator.store import Store, StoreUnavailable
from actuator.store.counters import DEMAND_TO_FREE_BUCKETS

# Exported at 0 from the start: increase() cannot see the first event of a series that
# appears with it, so a new reason or status code would otherwise read one low.
WEBHOOK_CODES = ("200", "400", "401", "403", "413", "415", "422", "503")
# Refusals, and the holds that refused before they deferred (kept for dashboards' sake).
REFUSAL_REASONS = tuple(str(r) for r in Reason if r in REFUSALS | HOLDS)


class ActuatorCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "gpu_reclaimer_store_up", "1 when the actuator's database could be read"
        )
        try:
            snap = self.store.metric_snapshot()
        except StoreUnavailable:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        states: dict[str, int] = snap["states"]
        total = sum(states.values())
        yield CounterMetricFamily(
            "gpu_idle_detected", "Idle GPU processes reported by alerts (cases opened)", total
        )
        yield CounterMetricFamily(
            "gpu_released_success",
            "Cases whose process tree exited and whose GPU memory was freed",
            states.get(State.RECLAIMED, 0),
        )
        yield CounterMetricFamily(
            "gpu_release_failed",
            "Cases that signalled but could not free the GPU memory",
            states.get(State.FAILED, 0),
        )
        yield CounterMetricFamily(
            "gpu_memory_freed_bytes", "GPU memory freed by reclaimed cases", snap["freed_bytes"]
        )
        cases = GaugeMetricFamily("gpu_reclaimer_cases", "Cases by current state", labels=["state"])
        for state in State:
            cases.add_metric([str(state)], states.get(state, 0))
        yield cases
        requests = CounterMetricFamily(
            "gpu_reclaimer_webhook_requests",
            "Alertmanager webhook requests by HTTP status",
            labels=["code"],
        )
        by_code = {code: 0 for code in WEBHOOK_CODES} | snap["requests"]
        for code, value in sorted(by_code.items()):
            requests.add_metric([code], value)
        yield requests
        yield CounterMetricFamily(
            "gpu_reclaimer_alerts_rejected",
            "Alerts refused one by one inside an accepted payload (invalid fields, dates out of "
            "range); the rest of the payload was recorded",
            snap["alerts_rejected"],
        )
        signals = CounterMetricFamily(
            "gpu_reclaimer_signals_sent", "Signals delivered to processes", labels=["signal"]
        )
        for name in SIGNAL_NAMES:
            signals.add_metric([name], snap["signals"].get(name, 0))
        yield signals
        refusals = CounterMetricFamily(
            "gpu_reclaimer_refusals", "Cases refused, by reason", labels=["reason"]
        )
        by_reason = {reason: 0 for reason in REFUSAL_REASONS}
        for reason, value in snap["refusals"].items():
            by_reason[reason or "unknown"] = by_reason.get(reason or "unknown", 0) + value
        for reason, value in sorted(by_reason.items()):
            refusals.add_metric([reason], value)
        yield refusals
        failures = CounterMetricFamily(
            "gpu_reclaimer_auth_failures",
            "Refused operator authentications, by reason (expired, audience, role, ...)",
            labels=["reason"],
        )
        for reason, value in sorted(snap["auth_failures"].items()):
            failures.add_metric([reason], value)
        yield failures
        yield CounterMetricFamily(
            "gpu_reclaimer_notices",
            "Cases whose owner was warned (the notice recorded before the grace period)",
            snap["notices"],
        )
        reclaim = snap["time_to_reclaim"]
        yield HistogramMetricFamily(
            "gpu_reclaimer_time_to_reclaim_seconds",
            "From a case's opening to its process tree's exit, for reclaimed cases",
            buckets=[(repr(b), n) for b, n in reclaim["buckets"]] + [("+Inf", reclaim["count"])],
            sum_value=reclaim["sum"],
        )
        yield CounterMetricFamily(
            "gpu_reclaimer_audit_records_dropped",
            "Records of what was done (notices, signals, follow-ups) the audit log lost: its "
            "volume stayed full until the records waiting in memory passed their bound",
            sum(snap["named"].get("audit_records_dropped", {}).values()),
        )
        yield from _demand_metrics(snap["named"])
        yield GaugeMetricFamily(
            "gpu_reclaimer_circuit_breaker_open",
            "1 while the circuit breaker stops enforcement",
            1 if snap["breaker_open"] else 0,
        )


def _demand_metrics(named: dict[str, dict[str, int]]) -> Iterator[Metric]:
    """Reclaims by trigger and, where demand is read, its sources and the wait it ends."""
    reclaims = CounterMetricFamily(
        "gpu_reclaimer_reclaims",
        "Reclaimed cases by trigger: idle (the grace ran out) or demand (someone waited)",
        labels=["trigger"],
    )
    needless = CounterMetricFamily(
        "gpu_reclaimer_needless_reclaims",
        "Reclaimed GPUs nobody took within demand.needless_after, by trigger",
        labels=["trigger"],
    )
    for trigger in ("idle", "demand"):
        reclaims.add_metric([trigger], named.get("reclaims", {}).get(trigger, 0))
        needless.add_metric([trigger], named.get("needless_reclaims", {}).get(trigger, 0))
    yield reclaims
    yield needless
    up = GaugeMetricFamily(
        "gpu_reclaimer_demand_source_up",
        "1 when the demand source answered at its last reading; 0: demand unknown, held",
        labels=["source"],
    )
    waiting = GaugeMetricFamily(
        "gpu_reclaimer_demand_waiting",
        "Requests waiting for GPUs at the last reading, by source (pool for PromQL)",
        labels=["source"],
    )
    for source, value in sorted(named.get("demand_up", {}).items()):
        up.add_metric([source], value)
    for source, value in sorted(named.get("demand_waiting", {}).items()):
        waiting.add_metric([source], value)
    yield up
    yield waiting
    buckets = named.get("demand_to_free_bucket", {})
    count = named.get("demand_to_free_count", {}).get("", 0)
    yield HistogramMetricFamily(
        "gpu_reclaimer_demand_to_free_seconds",
        "From a waiting request choosing a GPU to that GPU being free (reclaim_when: demand)",
        buckets=[(repr(b), buckets.get(repr(b), 0)) for b in DEMAND_TO_FREE_BUCKETS]
        + [("+Inf", count)],
        sum_value=named.get("demand_to_free_ms", {}).get("", 0) / 1000,
    )
