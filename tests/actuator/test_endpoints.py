"""actuator/endpoints.py: an endpoint posts with the proxy, NO_PROXY, CA bundle and .netrc
settings the environment had when it was made, on real loopback servers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from actuator.endpoints import MAX_ANSWER, Endpoint, EndpointError
from tests.support import wait_until


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []  # (request target, Authorization)
        self.proxy_auth: list[str] = []  # Proxy-Authorization, as received
        self.streamed = 0  # bytes the endless answer wrote before the client left
        self.stream_ended = False
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.seen.append((self.path, self.headers.get("Authorization", "")))
        self.server.proxy_auth.append(self.headers.get("Proxy-Authorization", ""))
        if self.path.endswith("/moved"):
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.endswith("/endless"):  # an answer that never ends, as fast as it goes
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 40))
            self.end_headers()
            chunk = b"x" * 65536
            try:
                while self.server.streamed < 1 << 30:
                    self.wfile.write(chunk)
                    self.server.streamed += len(chunk)
            except OSError:
                pass  # the client stopped reading and closed
            self.server.stream_ended = True
            return
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
    hook = Endpoint(endpoint.url + "/hook")
    assert hook.post_json(endpoint.url + "/hook?sign=1", {}, timeout=5).status == 200
    assert proxy.seen == [(endpoint.url + "/hook?sign=1", "")]  # the absolute form: proxied
    assert endpoint.seen == []


def test_no_proxy_sends_the_post_directly(
    servers: tuple[_Recorder, _Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, proxy = servers
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    hook = Endpoint(endpoint.url + "/hook")
    assert hook.post_json(endpoint.url + "/hook", {}, timeout=5).status == 200
    assert endpoint.seen == [("/hook", "")]
    assert proxy.seen == []


def test_the_environment_is_read_once_when_the_endpoint_is_made(
    servers: tuple[_Recorder, _Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, proxy = servers
    hook = Endpoint(endpoint.url + "/hook")
    monkeypatch.setenv("HTTP_PROXY", proxy.url)  # too late for this endpoint
    assert hook.post_json(endpoint.url + "/hook", {}, timeout=5).status == 200
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
    hook = Endpoint(endpoint.url + "/hook")
    assert hook.settings.verify == str(bundle)
    assert hook.post_json(endpoint.url + "/hook", {}, timeout=5).status == 200
    assert endpoint.seen == [("/hook", "Basic cm9ib3Q6czNjcmV0")]  # robot:s3cret


def test_a_proxy_with_credentials_in_its_url_gets_them_as_proxy_authorization(
    servers: tuple[_Recorder, _Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, proxy = servers
    monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://relay:pa55@"))
    hook = Endpoint(endpoint.url + "/hook")
    assert hook.post_json(endpoint.url + "/hook", {}, timeout=5).status == 200
    assert proxy.seen == [(endpoint.url + "/hook", "")]
    assert proxy.proxy_auth == ["Basic cmVsYXk6cGE1NQ=="]  # relay:pa55


def test_a_redirect_is_answered_not_followed(servers: tuple[_Recorder, _Recorder]) -> None:
    endpoint, _ = servers
    answer = Endpoint(endpoint.url).post_json(endpoint.url + "/moved", {"a": 1}, timeout=5)
    assert answer.status == 302
    assert endpoint.seen == [("/moved", "")]  # no second request, no GET to /elsewhere


def test_an_answer_that_never_ends_is_cut_at_its_bound(
    servers: tuple[_Recorder, _Recorder],
) -> None:
    endpoint, _ = servers
    hook = Endpoint(endpoint.url)
    answer = hook.post_json(endpoint.url + "/endless", {}, timeout=5)
    assert answer.status == 200 and len(answer.body) == MAX_ANSWER
    # The rest was never read: the server saw its connection go long before its 1 GiB.
    assert wait_until(lambda: endpoint.stream_ended, 10)
    assert endpoint.streamed < 1 << 30
    # The connection was not reused for the next post: it gets its own answer.
    assert hook.post_json(endpoint.url + "/hook", {}, timeout=5).body == b"ok"


def test_what_json_cannot_carry_and_a_refused_connection_are_errors_not_exceptions(
    servers: tuple[_Recorder, _Recorder],
) -> None:
    endpoint, _ = servers
    hook = Endpoint(endpoint.url)
    with pytest.raises(EndpointError, match="not JSON"):
        hook.post_json(endpoint.url + "/hook", {"x": float("nan")}, timeout=5)
    endpoint.shutdown()
    endpoint.server_close()
    with pytest.raises(EndpointError, match=r"NewConnectionError|refused"):
        hook.post_json(endpoint.url + "/hook", {}, timeout=5)


def test_tls_is_verified_against_the_bundle_the_environment_names(
    servers: tuple[_Recorder, _Recorder], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A robot behind a site's own CA: trusted once REQUESTS_CA_BUNDLE names it, refused
    (no answer, nothing sent) with requests' default bundle."""
    import ssl

    from tests.helpers.certs import self_signed

    endpoint, _ = servers
    key, cert = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    endpoint.socket = context.wrap_socket(endpoint.socket, server_side=True)
    url = f"https://127.0.0.1:{endpoint.server_port}/hook"
    with pytest.raises(EndpointError, match=r"SSL|certificate"):
        Endpoint(url).post_json(url, {}, timeout=5)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    assert Endpoint(url).post_json(url, {}, timeout=5).body == b"ok"
    assert endpoint.seen == [("/hook", "")]


@pytest.mark.parametrize("proxy", ["http://[bad", "ftp://proxy:21", "not a url"])
def test_a_proxy_variable_that_cannot_be_used_fails_each_post_saying_why(
    servers: tuple[_Recorder, _Recorder], monkeypatch: pytest.MonkeyPatch, proxy: str
) -> None:
    """The actuator still starts (the endpoint is made), nothing is sent around the proxy,
    and each post's failure names the variable's value."""
    endpoint, _ = servers
    monkeypatch.setenv("HTTP_PROXY", proxy)
    hook = Endpoint(endpoint.url + "/hook?key=secret")
    with pytest.raises(EndpointError, match="is not usable"):
        hook.post_json(endpoint.url + "/hook?key=secret", {}, timeout=5)
    assert endpoint.seen == []
