"""`gpu-reclaimer why`'s client (actuator/tools/why_cli.py) against a loopback HTTP server that
answers as a broken or a healthy actuator would: every failure is one line naming the
problem (a CommandError, exit 2), and the token goes where the API expects it."""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from actuator.tools.why_cli import TOKEN_ENV, _token, fetch
from exporter.argtypes import CommandError
from tests.support import REPO, free_port


class _Answers(http.server.BaseHTTPRequestHandler):
    """Answers by path: /<status>/... with that status; /text/... with a non-JSON body."""

    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        head = self.path.split("/")[1]
        status = int(head) if head.isdigit() else 200
        body = b"<html>proxy error</html>" if head == "text" else b'{"case": 7, "steps": []}'
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Answers.seen = []
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_the_case_is_fetched_with_the_token_as_a_bearer(server: str) -> None:
    assert fetch(server + "/", 7, "s3cret") == {"case": 7, "steps": []}
    assert _Answers.seen == [("/api/v1/cases/7/why", "Bearer s3cret")]
    fetch(server, 8, None)
    assert _Answers.seen[-1] == ("/api/v1/cases/8/why", None)


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("/404", "no case 7 at "),
        ("/401", "refused the request (401): give its token with --token-file"),
        ("/403", "refused the request (403)"),
        ("/500", "answered 500"),
        ("/text", "did not answer JSON"),
    ],
)
def test_each_failure_of_the_actuator_is_one_line(server: str, prefix: str, message: str) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        fetch(server + prefix, 7, None)


def test_an_address_that_is_not_an_actuator_is_named() -> None:
    with pytest.raises(CommandError, match=re.escape("is not an http(s) URL")):
        fetch("actuator:9836", 1, None)
    with pytest.raises(
        CommandError, match=re.escape("cannot reach the actuator at http://127.0.0.1:")
    ):
        fetch(f"http://127.0.0.1:{free_port()}", 1, None)  # nothing listens there


def test_the_token_comes_from_its_file_else_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert _token(None) == "from-env"
    monkeypatch.setenv(TOKEN_ENV, "")
    assert _token(None) is None
    (tmp_path / "token").write_text("from-file\n")
    assert _token(str(tmp_path / "token")) == "from-file"
    with pytest.raises(CommandError, match="cannot read the token file"):
        _token(str(tmp_path / "missing"))


def test_a_reader_that_goes_away_ends_it_quietly(server: str) -> None:
    """`gpu-reclaimer why 7 | head -1`: the reader closes the pipe first; no traceback, and
    the exit a shell reports for SIGPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before a line is written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "exporter.cli", "why", "7", "--actuator", server, "--json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=REPO,
            timeout=60,
        )
    finally:
        os.close(write_end)
    err = done.stderr.decode()
    assert done.returncode == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err
