"""The exporter's HTTP server: slow clients never cost a scrape its answer."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge

from exporter import web
from tests.support import hold


@pytest.fixture
def server() -> Iterator[web.MetricsServer]:
    registry = CollectorRegistry()
    Gauge("demo_value", "a value", registry=registry).set(42)
    srv = web.serve(web.build_app(registry, "node-a", "test"), "127.0.0.1", 0)
    yield srv
    srv.shutdown()


def scrape(port: int, **headers: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/metrics", headers=headers)
    response = conn.getresponse()
    response.body = response.read()  # type: ignore[attr-defined]
    conn.close()
    return response


def test_scrapes_are_answered_beside_idle_and_trickling_connections(server) -> None:
    held = hold(server.server_port, 200) + hold(
        server.server_port, 200, b"GET /metrics HTTP/1.1\r\n"
    )
    try:
        for _ in range(5):
            response = scrape(server.server_port, **{"Accept-Encoding": "gzip"})
            assert response.status == 200 and response.getheader("Content-Encoding") == "gzip"
    finally:
        for s in held:
            s.close()


def test_the_longest_waiting_connection_makes_room(server, monkeypatch) -> None:
    monkeypatch.setattr(web, "MAX_CONNECTIONS", 20)
    held = hold(server.server_port, 30)
    try:
        time.sleep(0.3)
        assert scrape(server.server_port).status == 200
        assert held[0].recv(1) == b""  # the oldest idle one was closed
    finally:
        for s in held:
            s.close()


def test_a_request_head_that_never_finishes_is_cut_off(server, monkeypatch) -> None:
    monkeypatch.setattr(web, "HEAD_TIMEOUT", 0.5)
    (trickler,) = hold(server.server_port, 1, b"GET /metrics HTTP/1.1\r\nX-Slow: ")
    started = time.monotonic()
    trickler.settimeout(5)
    assert trickler.recv(1) == b""
    assert time.monotonic() - started < 3
    trickler.close()


def test_keep_alive_landing_page_and_bad_requests(server) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)
    for path, status in (("/metrics", 200), ("/", 200), ("/nope", 404), ("/metrics", 200)):
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        assert response.status == status, path
    assert b"demo_value 42.0" in scrape(server.server_port).body  # type: ignore[attr-defined]
    (raw,) = hold(server.server_port, 1, b"NOT HTTP\r\n\r\n")
    assert raw.recv(100).startswith(b"HTTP/1.1 400")
    raw.close()
    assert body
