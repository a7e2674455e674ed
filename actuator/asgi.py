"""The Flask app served by gunicorn's asyncio (ASGI) worker.

The event loop reads every request in full before the app sees it, so idle or trickling
connections cost a file descriptor and a coroutine, never one of the threads that answer
webhooks (gunicorn's sync and thread workers read a request in the thread that serves it:
two slow clients were enough to stall them). asgiref's `WsgiToAsgi` runs the Flask app in
a thread; `BodyLimit` refuses an oversized body before it is read or spooled to disk.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from asgiref.wsgi import WsgiToAsgi

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


def asgi_app(flask_app: Any, max_body: int, on_refused: Callable[[str], None]) -> Asgi:
    return BodyLimit(WsgiToAsgi(flask_app), max_body, on_refused)
