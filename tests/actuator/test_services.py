"""End to end, services (issue 48): a real actuator under gunicorn, real serving workloads
answering real HTTP. A request served during the grace cancels the case; a server that
only listens on loopback is a job like any other; one other hosts can reach is a service,
never warned for being quiet on its own."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator

import pytest

from exporter.sim.state import init_node
from tests.helpers.actuator import Actuator, Workloads, alert_for, payload
from tests.support import free_service_port, http_get, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def enforce(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workloads, Actuator]]:
    base = tmp_path_factory.mktemp("services")
    init_node(base / "node", gpus=2, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    workloads = Workloads(base / "node")
    policy = {"projects": [{"name": "slow", "match": {"labels": ["slow"]}, "grace": "30s"}]}
    actuator = Actuator(base / "actuator", base / "node", policy).start()
    yield workloads, actuator
    actuator.stop()
    workloads.cleanup()


def _serving(workloads: Workloads, address: str = "127.0.0.1"):  # type: ignore[no-untyped-def]
    port = free_service_port()
    w = workloads.spawn("--serve", str(port), "--serve-address", address)
    wait_until(lambda: http_get(f"http://127.0.0.1:{port}/health"))
    return w, port


def _stays_pending(actuator: Actuator, w) -> None:  # type: ignore[no-untyped-def]
    """Quiet, yet not warned: a job in this configuration is warned within a tick (a grace of
    half a second) and reclaimed within a few; a service's rule waits an hour of quiet and
    then for someone who needs its GPU."""
    wait_until(lambda: actuator.case_for(w))
    time.sleep(4)
    case = actuator.case_for(w)
    assert case is not None and case["state"] == "pending", case
    assert case["signals"] == [] and case["notified_at"] is None and w.alive()


@pytest.mark.reliability(65)
def test_a_request_served_during_the_grace_cancels_the_case(enforce) -> None:
    workloads, actuator = enforce
    w, port = _serving(workloads)
    actuator.post(payload(alert_for(w, project="slow")))
    actuator.wait_state(w, "notified")
    # A gateway's keep-alive connection brings one request with a real prompt.
    gateway = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps({"prompt": "x" * 4 * 2000, "max_tokens": 1}).encode()
        gateway.request("POST", "/v1/completions", body)
        assert gateway.getresponse().status == 200
        case = actuator.wait_state(w, "cancelled", "terminating", "reclaimed")
    finally:
        gateway.close()
    assert case["state"] == "cancelled" and case["reason_code"] == "activity", case
    assert "data moved on its connections" in case["reason"], case["reason"]
    assert case["signals"] == [] and w.alive()


@pytest.mark.reliability(65)
def test_a_loopback_server_that_serves_nothing_is_a_job_and_reclaimed(enforce) -> None:
    workloads, actuator = enforce
    w, _ = _serving(workloads)
    actuator.post(payload(alert_for(w)))
    case = actuator.wait_state(w, "reclaimed", "failed", "refused", "cancelled")
    assert case["state"] == "reclaimed", case
    assert "as a service" not in case["rule"]


@pytest.mark.reliability(65)
def test_a_service_is_not_warned_for_being_quiet(enforce) -> None:
    workloads, actuator = enforce
    w, _ = _serving(workloads, "0.0.0.0")
    actuator.post(payload(alert_for(w, alertname="GpuServiceIdle", **{"class": "service"})))
    _stays_pending(actuator, w)


@pytest.mark.reliability(65)
def test_a_service_the_alert_calls_a_job_is_still_a_service(enforce) -> None:
    """The node's listeners decide, not the alert's class."""
    workloads, actuator = enforce
    w, _ = _serving(workloads, "0.0.0.0")
    actuator.post(payload(alert_for(w)))  # GpuProcessIdle, class idle: a wrong alert
    _stays_pending(actuator, w)


@pytest.mark.reliability(67)
def test_an_idle_two_rank_job_is_judged_as_a_job_and_reclaimed(enforce) -> None:
    """Rank 0's TCPStore on every interface at MASTER_PORT, each rank's NCCL-like bootstrap
    listener on a port the kernel picked, rank 1 connected to rank 0's store: their own
    rendezvous, not a service. Idle, both are reclaimed as jobs."""
    workloads, actuator = enforce
    store = free_service_port()
    master = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store)}
    rank0 = workloads.spawn("--rank-store", str(store), env=master)
    wait_until(lambda: http_get_refused_or_open(store))
    rank1 = workloads.spawn("--rank-peer", str(store), gpu=1, env=master)
    for rank in (rank0, rank1):
        actuator.post(payload(alert_for(rank)))
    for rank in (rank0, rank1):
        case = actuator.wait_state(rank, "reclaimed", "failed", "refused", "cancelled")
        assert case["state"] == "reclaimed", case
        assert "as a service" not in case["rule"], case["rule"]


def http_get_refused_or_open(port: int) -> bool:
    """The rank's store listens (a plain TCP connect succeeds; it answers no HTTP)."""
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
