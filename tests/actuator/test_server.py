"""The actuator's HTTP server (gunicorn, asyncio worker): slow clients and big bodies."""

from __future__ import annotations

import socket

import pytest
import requests

from tests.helpers.actuator import TOKEN, Actuator, Workloads, alert_for, payload
from tests.support import hold

pytestmark = pytest.mark.timeout(90)


def test_webhooks_are_acknowledged_beside_idle_and_trickling_connections(
    workloads: Workloads, actuator_factory
) -> None:
    # The held connections would hold the stop for its whole graceful timeout.
    actuator: Actuator = actuator_factory(
        workloads.node_dir, mode="observe", server={"graceful_timeout": 1}
    )
    w = workloads.spawn()
    held = hold(actuator.port, 100) + hold(
        actuator.port, 100, b"POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\nContent-Le"
    )
    try:
        for _ in range(10):
            # A fresh connection each time, like a new Alertmanager delivery.
            answer = requests.post(
                actuator.url + "/api/v1/alerts",
                json=payload(alert_for(w)),
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=5,
            )
            assert answer.status_code == 200
        assert actuator.session.get(actuator.url + "/-/ready", timeout=5).status_code == 200
    finally:
        for s in held:
            s.close()


@pytest.mark.reliability(7)
def test_an_oversized_body_is_refused_before_it_is_read(
    workloads: Workloads, actuator_factory
) -> None:
    # The raw chunked connection below keeps a worker busy until the graceful stop gives up:
    # a short one keeps the teardown short.
    actuator: Actuator = actuator_factory(
        workloads.node_dir, mode="observe", server={"graceful_timeout": 1}
    )
    big = b'{"version": "4", "alerts": [' + b" " * (2 * 2**20) + b"]}"
    answer = actuator.session.post(
        actuator.url + "/api/v1/alerts",
        data=big,
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert answer.status_code == 413
    assert actuator.metric("gpu_reclaimer_webhook_requests_total", code="413") == 1
    with socket.create_connection(("127.0.0.1", actuator.port), timeout=5) as s:
        # No Content-Length, chunked: the limit counts what arrives.
        s.sendall(
            b"POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\n\r\n"
        )
        chunk = b" " * 65536
        try:
            for _ in range(40):
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except OSError:
            pass  # the server may close the connection while we send
        assert s.recv(64).startswith(b"HTTP/1.1 413")


def test_the_actuator_serves_https_itself(tmp_path, workloads) -> None:
    """server.tls: gunicorn terminates TLS; plain HTTP on the same port gets nothing."""
    from tests.helpers.certs import self_signed

    key, cert = self_signed(tmp_path)
    actuator = Actuator(
        tmp_path / "a",
        workloads.node_dir,
        {"server": {"tls": {"certfile": str(cert), "keyfile": str(key)}}},
    )
    actuator.url = actuator.url.replace("http://", "https://")
    actuator.session.verify = str(cert)
    actuator.session.trust_env = False  # else $REQUESTS_CA_BUNDLE overrides `verify`
    actuator.start()
    try:
        assert actuator.session.get(actuator.url + "/-/healthy", timeout=5).status_code == 200
        assert actuator.get("/api/v1/cases")["cases"] == []
        with pytest.raises(requests.ConnectionError):
            requests.get(actuator.url.replace("https://", "http://") + "/-/healthy", timeout=5)
        with pytest.raises(requests.exceptions.SSLError):  # an untrusted client refuses it
            requests.get(actuator.url + "/-/healthy", timeout=5)
    finally:
        actuator.stop()
