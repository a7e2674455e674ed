"""End to end, a service is something that serves (issue 57): a real actuator under
gunicorn, real HTTP servers on every interface, a `service_window` of 3 s so the node can
watch a listener for a whole window here. A listener no client reached in that window is a
job and reclaimed; one with a client connected is a service, its rule naming the client,
warned but never reclaimed while nobody waits for its GPU."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator

import pytest

from exporter.sim.state import init_node
from tests.helpers.actuator import Actuator, Workloads, alert_for, payload
from tests.support import free_service_port, http_get, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def short_window(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workloads, Actuator]]:
    base = tmp_path_factory.mktemp("service-clients")
    init_node(base / "node", gpus=2, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    workloads = Workloads(base / "node")
    policy = {"defaults": {"service_window": "3s"}}
    actuator = Actuator(base / "actuator", base / "node", policy).start()
    yield workloads, actuator
    actuator.stop()
    workloads.cleanup()


def _serving(workloads: Workloads):  # type: ignore[no-untyped-def]
    port = free_service_port()
    w = workloads.spawn("--serve", str(port), "--serve-address", "0.0.0.0")
    wait_until(lambda: http_get(f"http://127.0.0.1:{port}/health"))
    return w, port


@pytest.mark.reliability(67)
def test_a_listener_no_client_reached_in_the_window_is_a_job(short_window) -> None:
    """A TensorBoard with --bind_all nobody reads: once the node has watched it for the
    service window with no client, it is judged as the idle job it is."""
    workloads, actuator = short_window
    w, _ = _serving(workloads)  # the health check's connection closed before the case opens
    time.sleep(1.5)
    actuator.post(payload(alert_for(w)))
    case = actuator.wait_state(w, "reclaimed", "failed", "refused", "cancelled")
    assert case["state"] == "reclaimed", case
    assert "as a service" not in case["rule"], case["rule"]


@pytest.mark.reliability(67)
def test_a_service_with_a_client_connected_is_never_reclaimed_for_quiet(short_window) -> None:
    """A gateway's connection open: a service, named by its client; warned after the
    window, never signalled while nobody waits for its GPU."""
    workloads, actuator = short_window
    w, port = _serving(workloads)
    gateway = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        gateway.request("GET", "/health")
        assert gateway.getresponse().read()
        time.sleep(1.5)  # the keep-alive window (1 s here): the request's bytes are history
        actuator.post(payload(alert_for(w)))
        case = actuator.wait_state(w, "notified", "reclaimed", "terminating", "cancelled")
        assert case["state"] == "notified", case
        assert "client connection(s) open on port" in case["rule"], case["rule"]
        time.sleep(3)
        case = actuator.case_for(w)
        assert case is not None and case["state"] == "notified" and case["signals"] == []
        assert w.alive()
    finally:
        gateway.close()
