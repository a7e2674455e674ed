"""The local receiver that stands in for chat and the owners' channels: it records each
POST by path (JSON or not), answers as a robot does, answers 503 on a path set to fail
(recording nothing), and serves its pages."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

import pytest
import requests

from actuator.demo.sink import Sink, _Server


def test_posts_are_recorded_by_path_and_answered_as_a_robot_does() -> None:
    sink = Sink().start()
    try:
        reply = requests.post(sink.url + "/chat", json={"alerts": [1]}, timeout=5)
        assert reply.status_code == 200 and reply.json()["errcode"] == 0
        requests.post(sink.url + "/wecom", data=b"not json", timeout=5)
        (chat,) = sink.posts("/chat")
        assert chat.body == {"alerts": [1]} and chat.at > 0
        assert [r.body for r in sink.posts("/wecom")] == [None]
        assert sink.posts("/dingtalk") == []
    finally:
        sink.stop()


def test_a_failing_path_answers_503_and_records_nothing() -> None:
    sink = Sink(failing={"/wecom"}).start()
    try:
        assert requests.post(sink.url + "/wecom", json={}, timeout=5).status_code == 503
        assert sink.posts("/wecom") == []
        sink.failing.clear()  # the channel is back
        assert requests.post(sink.url + "/wecom", json={}, timeout=5).status_code == 200
        assert len(sink.posts("/wecom")) == 1
    finally:
        sink.stop()


def test_pages_are_served_and_others_are_not_found() -> None:
    sink = Sink(pages={"/runbook": "<h1>runbook</h1>"}).start()
    try:
        page = requests.get(sink.url + "/runbook?lang=en", timeout=5)
        assert page.status_code == 200 and page.text == "<h1>runbook</h1>"
        assert requests.get(sink.url + "/other", timeout=5).status_code == 404
    finally:
        sink.stop()


def test_a_client_that_hung_up_prints_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """A notice that timed out, or Alertmanager stopped with the demo, closes its connection
    before the answer: nothing on the demo's screen. Any other error is still shown."""
    server = _Server(("127.0.0.1", 0), BaseHTTPRequestHandler)
    try:
        for hung_up in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
            try:
                raise hung_up
            except ConnectionError:
                server.handle_error(None, ("127.0.0.1", 1))
        assert capsys.readouterr().err == ""
        try:
            raise ValueError("a real bug")
        except ValueError:
            server.handle_error(None, ("127.0.0.1", 1))
        assert "ValueError: a real bug" in capsys.readouterr().err
    finally:
        server.server_close()
