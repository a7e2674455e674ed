"""The Flask app served by gunicorn's asyncio (ASGI) worker.

The event loop reads every request in full before the app sees it, so idle or trickling
connections cost a file descriptor and a coroutine, never one of the threads that answer
webhooks (gunicorn's sync and thread workers read a request in the thread that serves it:
two slow clients were enough to stall them). The Flask app runs in a pool of
`APP_THREADS` threads per worker (asgiref runs it in one thread by default: one request at
a time per worker), so the webhook's deliveries that arrive together commit together
(actuator/store/group_commit.py). `BodyLimit` refuses an oversized body before it is read
or spooled to disk.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.wsgi import WsgiToAsgi, WsgiToAsgiInstance

# Requests a worker answers at once. The app holds no lock across a request; the store keeps
# a connection per thread (on PostgreSQL: workers x APP_THREADS per replica at most, beside
# the reconciler's), and its writes serialise in the database (and group there).
APP_THREADS = 8

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """413 for a request whose declared or received body exceeds `max_body` bytes."""

    def __init__(self, app: Asgi, max_body: int, on_refused: Callable[[str], None]) -> None:
        self.app = app
        self.max_body = max_body
        self.on_refused = on_refused  # counts the refusal (path) like the app's own 413s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await self._refuse(scope, send)
            return
        received = 0
        too_large = False

        async def bounded() -> MutableMapping[str, Any]:
            nonlocal received, too_large
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body:
                too_large = True
                return {"type": "http.disconnect"}
            return message

        try:
            await self.app(scope, bounded, send)
        except ValueError:
            if not too_large:
                raise
            await self._refuse(scope, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        self.on_refused(scope.get("path", ""))
        body = json.dumps({"error": f"body larger than {self.max_body} bytes"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


# asgiref's own request runner, undecorated: run here in the pool, with its messages kept.
_RUN_WSGI_APP = WsgiToAsgiInstance.__dict__["run_wsgi_app"].func
_APP_POOL = ThreadPoolExecutor(APP_THREADS, thread_name_prefix="app")


class _PooledInstance(WsgiToAsgiInstance):
    """asgiref's WSGI request, its answer collected in the app's thread and sent from the
    event loop: one hand-over each way. asgiref sends each message from the app's thread
    through the loop and waits for it (three round trips per answer, each a new task); in
    the alert storm they and their thread pool took more of the worker than Flask itself
    (docs/performance.md). The app's answers are whole JSON or text bodies, never a stream."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._send = send  # asgiref reads the whole body, then awaits run_wsgi_app
        await super().__call__(scope, receive, send)

    async def run_wsgi_app(self, body: Any) -> None:
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(_APP_POOL, self._answer, body)
        for message in answer:
            await self._send(message)

    def _answer(self, body: Any) -> list[MutableMapping[str, Any]]:
        messages: list[MutableMapping[str, Any]] = []
        self.sync_send = messages.append
        _RUN_WSGI_APP(self, body)
        return messages


class PooledWsgiToAsgi(WsgiToAsgi):
    """WsgiToAsgi whose requests run in `APP_THREADS` threads at once."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _PooledInstance(self.wsgi_application, self.duplicate_header_limit)(
            scope, receive, send
        )


def asgi_app(flask_app: Any, max_body: int, on_refused: Callable[[str], None]) -> Asgi:
    return BodyLimit(PooledWsgiToAsgi(flask_app), max_body, on_refused)
