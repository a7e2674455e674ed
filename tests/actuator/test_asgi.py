"""The body limit in front of the Flask app, through the ASGI interface gunicorn's worker
calls: an oversized body (declared or as it arrives) is refused with 413 before the app
reads it; everything else reaches the app whole."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

from flask import Flask, request

from actuator.asgi import asgi_app

LIMIT = 1000


def _flask() -> Flask:
    app = Flask("t")

    @app.post("/api/v1/alerts")
    def alerts() -> dict[str, int]:
        return {"read": len(request.get_data())}

    return app


def _call(
    headers: list[tuple[bytes, bytes]], chunks: list[bytes]
) -> tuple[int, dict[str, Any], list[str], int]:
    """(status, JSON body, paths refused, messages the app pulled) of one request."""
    refused: list[str] = []
    app = asgi_app(_flask(), LIMIT, refused.append)
    pulled = 0
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        nonlocal pulled
        pulled += 1
        if pulled <= len(chunks):
            return {
                "type": "http.request",
                "body": chunks[pulled - 1],
                "more_body": pulled < len(chunks),
            }
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/alerts",
        "raw_path": b"/api/v1/alerts",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 9836),
    }
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), refused, pulled


def test_a_body_within_the_limit_reaches_the_app_whole() -> None:
    body = b"x" * LIMIT
    status, answer, refused, _ = _call([(b"content-length", b"1000")], [body[:600], body[600:]])
    assert (status, answer, refused) == (200, {"read": LIMIT}, [])


def test_a_declared_oversized_body_is_refused_unread() -> None:
    status, answer, refused, pulled = _call([(b"content-length", b"1001")], [b"x" * 1001])
    assert status == 413 and "larger than 1000 bytes" in answer["error"]
    assert refused == ["/api/v1/alerts"] and pulled == 0  # not one byte read


def test_a_length_that_is_not_a_number_is_refused() -> None:
    for declared in (b"-1", b"1e3", b"\xd9\xa1", b""):
        status, _, refused, pulled = _call([(b"content-length", declared)], [b"{}"])
        assert status == 413 and refused and pulled == 0, declared


def test_a_chunked_body_is_counted_as_it_arrives() -> None:
    chunk = b"y" * 400
    status, answer, refused, pulled = _call([(b"transfer-encoding", b"chunked")], [chunk] * 10)
    assert status == 413 and refused == ["/api/v1/alerts"]
    assert pulled == 3  # stopped at the chunk that crossed the limit, not all ten
    assert "larger than" in answer["error"]


def test_requests_of_one_worker_run_at_once() -> None:
    """Eight requests that each wait for the others (a barrier) all finish: the app runs
    in a pool, not asgiref's one shared thread (where the first would wait for ever)."""
    import threading

    barrier = threading.Barrier(8, timeout=10)
    app = Flask("t")

    @app.post("/api/v1/alerts")
    def alerts() -> dict[str, int]:
        return {"arrived": barrier.wait()}

    served = asgi_app(app, LIMIT, lambda _: None)

    async def one() -> int:
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> MutableMapping[str, Any]:
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/api/v1/alerts",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json")],
            "http_version": "1.1",
            "scheme": "http",
            "server": ("127.0.0.1", 80),
            "client": ("127.0.0.1", 1),
            "root_path": "",
        }
        await served(scope, receive, send)
        return int(sent[0]["status"])

    async def all_at_once() -> list[int]:
        return await asyncio.gather(*(one() for _ in range(8)))

    assert asyncio.run(all_at_once()) == [200] * 8


def _answer_of(wsgi: Any) -> tuple[list[str], list[MutableMapping[str, Any]]]:
    """What happened, in order, and what was sent, for one request to a bare WSGI app."""
    events: list[str] = []
    sent: list[MutableMapping[str, Any]] = []
    served = asgi_app(wsgi(events), LIMIT, lambda _: None)

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        events.append(f"sent {message['type']}")
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/metrics",
        "query_string": b"",
        "headers": [],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "root_path": "",
    }
    asyncio.run(served(scope, receive, send))
    return events, sent


def test_the_app_s_answer_is_collected_in_its_thread_and_sent_from_the_loop() -> None:
    """One hand-over each way: the app has produced its whole answer before the loop sends
    the first message (asgiref sent each message from the app's thread, waiting on the loop
    for each)."""

    def wsgi(events: list[str]) -> Any:
        def app(_environ: dict[str, Any], start_response: Any) -> Any:
            start_response("200 OK", [("Content-Type", "text/plain")])
            for chunk in (b"first ", b"second"):
                events.append(f"made {chunk.decode().strip()}")
                yield chunk

        return app

    events, sent = _answer_of(wsgi)
    assert events[:2] == ["made first", "made second"]
    assert all(e.startswith("sent ") for e in events[2:])
    assert sent[0] == {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/plain")],
    }
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"first second"
    assert sent[-1] == {"type": "http.response.body"}  # the end of the body


def test_an_answer_longer_than_its_content_length_is_cut_to_it() -> None:
    def wsgi(_events: list[str]) -> Any:
        def app(_environ: dict[str, Any], start_response: Any) -> list[bytes]:
            start_response("201 Created", [("Content-Length", "5")])
            return [b"abc", b"defgh"]

        return app

    _, sent = _answer_of(wsgi)
    assert sent[0]["status"] == 201
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"abcde"
