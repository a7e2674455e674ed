"""Demand from a queue a site exports (actuator/demand/promql_queue.py), on a real
Prometheus: counts, nonsense, an unreachable server; and, under a real actuator, a source
that goes down in the middle of an escalation."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from actuator.demand import DemandError
from actuator.demand.promql_queue import PromqlQueue, waiting_gpus
from tests.helpers.actuator import alert_for, payload
from tests.helpers.prom import start_prometheus
from tests.support import free_port, wait_until


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("prom-demand")
    config = base / "prometheus.yml"
    config.write_text("global: {scrape_interval: 15s}\n")
    with start_prometheus(config, base) as server:
        yield server.url


def _queue(url: str, query: str) -> PromqlQueue:
    from prometheus_api_client import PrometheusConnect

    return PromqlQueue(PrometheusConnect(url), "a100", query, ("gpu-a-*",))


def test_a_promql_queue_is_a_count_of_one_gpu_requests_in_its_pool(prometheus: str) -> None:
    requests = _queue(prometheus, "vector(3)").read().requests
    assert [r.gpus for r in requests] == [1, 1, 1]
    assert {r.nodes for r in requests} == {("gpu-a-*",)} and requests[0].source == "promql:a100"
    assert _queue(prometheus, "sum(no_such_metric)").read().requests == ()  # nobody waits
    two = _queue(prometheus, 'label_replace(vector(2), "p", "x", "", "")').read()
    assert len(two.requests) == 2


@pytest.mark.parametrize(
    "query", ["vector(-1)", "vector(0.5)", "vector(1/0)", "vector(NaN)", "sum(rate(", "vector(1e9)"]
)
@pytest.mark.reliability(51)
def test_nonsense_from_prometheus_is_unknown_demand(prometheus: str, query: str) -> None:
    with pytest.raises(DemandError):
        _queue(prometheus, query).read()


def test_an_unreachable_prometheus_is_unknown_demand() -> None:
    with pytest.raises(DemandError, match="Prometheus"):
        _queue(f"http://127.0.0.1:{free_port()}", "vector(1)").read()


def test_waiting_gpus_reads_scalars_and_vectors() -> None:
    assert waiting_gpus([1.0, "2"], "q") == 2
    assert waiting_gpus([{"metric": {}, "value": [1.0, "2"]}, {"value": [1, "1"]}], "q") == 3
    with pytest.raises(DemandError):
        waiting_gpus({"unexpected": True}, "q")


@pytest.mark.reliability(51)
def test_a_source_going_down_holds_an_escalation_past_its_deadline(
    tmp_path: Path, workloads, actuator_factory
) -> None:
    """A real actuator reads a real Prometheus's queue: demand starts the grace; Prometheus
    stops: demand is unknown, the gauge and the audit say which source is down, and nothing
    is signalled, even once the deadline the owner was told has passed."""
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: 15s}\n")
    with start_prometheus(config, tmp_path / "prom") as prom:
        actuator = actuator_factory(
            workloads.node_dir,
            defaults={"reclaim_when": "demand", "grace": "3s"},
            demand={
                "prometheus": prom.url,
                "interval": "0.2s",
                "pools": [{"pool": "sim", "nodes": ["*"], "query": "vector(1)"}],
            },
        )
        w = workloads.spawn(phases="idle")
        assert actuator.post(payload(alert_for(w))).status_code == 200
        wait_until(lambda: (actuator.case_for(w) or {}).get("demand"), 30)
        # Gone before the 3 s grace ends (the demand is read every 0.2 s).
    wait_until(
        lambda: actuator.metric("gpu_reclaimer_demand_source_up", source="promql:sim") == 0, 30
    )
    case = actuator.case_for(w)
    assert case is not None and case["demand"] is not None
    deadline = case["demand"]["since"] + 3
    wait_until(lambda: time.time() > deadline + 2, 10)  # well past it
    case = actuator.case_for(w)
    assert case is not None and case["state"] == "notified", case
    assert case["signals"] == [] and w.alive()
    audit = [json.loads(line) for line in (actuator.workdir / "audit.jsonl").open()]
    (down,) = [a for a in audit if a["event"] == "demand_source"]
    assert down["source"] == "promql:sim" and not down["up"] and "Prometheus" in down["error"]
