"""actuator/endpoints.py: a session posts with the proxy, NO_PROXY, CA bundle and .netrc
settings the environment had when it was made, on real loopback servers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from actuator.endpoints import session_for


class _Recorder(ThreadingHTTPServer):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []  # (request target, Authorization)
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.seen.append((self.path, self.headers.get("Authorization", "")))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def servers() -> Iterator[tuple[_Recorder, _Recorder]]:
    """(the endpoint, a proxy): both answer every POST and remember its request line."""
    pair = (_Recorder(), _Recorder())
    for server in pair:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield pair
    for server in pair:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUESTS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


def test_a_proxy_in_the_environment_carries_the_post(
    servers: tuple[_Recorder, _Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, proxy = servers
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    session = session_for(endpoint.url + "/hook")
    assert session.post(endpoint.url + "/hook?sign=1", json={}, timeout=5).status_code == 200
    assert proxy.seen == [(endpoint.url + "/hook?sign=1", "")]  # the absolute form: proxied
    assert endpoint.seen == []


def test_no_proxy_sends_the_post_directly(
    servers: tuple[_Recorder, _Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, proxy = servers
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    session = session_for(endpoint.url + "/hook")
    assert session.post(endpoint.url + "/hook", json={}, timeout=5).status_code == 200
    assert endpoint.seen == [("/hook", "")]
    assert proxy.seen == []


def test_the_environment_is_read_once_when_the_session_is_made(
    servers: tuple[_Recorder, _Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, proxy = servers
    session = session_for(endpoint.url + "/hook")
    monkeypatch.setenv("HTTP_PROXY", proxy.url)  # too late for this session
    assert session.post(endpoint.url + "/hook", json={}, timeout=5).status_code == 200
    assert endpoint.seen == [("/hook", "")]
    assert proxy.seen == []


def test_a_ca_bundle_and_netrc_from_the_environment_apply(
    servers: tuple[_Recorder, _Recorder], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    endpoint, _ = servers
    bundle = tmp_path / "site-ca.pem"
    bundle.write_text("")
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login robot password s3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    monkeypatch.setenv("NETRC", str(netrc))
    session = session_for(endpoint.url + "/hook")
    assert session.verify == str(bundle)
    assert session.post(endpoint.url + "/hook", json={}, timeout=5).status_code == 200
    assert endpoint.seen == [("/hook", "Basic cm9ib3Q6czNjcmV0")]  # robot:s3cret
