"""A tiny HTTP receiver standing in for the chat relay and the owners' notice channel.

Alertmanager's chat route and the actuator's owner notices need somewhere to go on a machine
with no chat: this records what was POSTed, so the demo can show it and tests can assert it.
It also serves the demo's pages (the runbook its alerts link to).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up before its answer (a timed-out notice, Alertmanager stopped
        with the demo) is not an error worth a traceback on the demo's screen."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@dataclass
class Received:
    """One POST: its path, arrival time and JSON body (None when not JSON)."""

    path: str
    at: float
    body: Any


@dataclass
class Sink:
    """Records POSTs on 127.0.0.1:`port` (0: any free port) in a thread until `stop()`."""

    port: int = 0
    received: list[Received] = field(default_factory=list)
    pages: dict[str, str] = field(default_factory=dict)  # GET path -> HTML (the runbook)
    failing: set[str] = field(default_factory=set)  # POST paths answered 503 (a channel down)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: _Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Sink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = sink.pages.get(self.path.split("?", 1)[0])
                body = (page or "not found").encode()
                self.send_response(200 if page is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(min(length, 4 * 2**20))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with sink._lock:
                    down = self.path in sink.failing
                    if not down:
                        sink.received.append(Received(self.path, time.time(), body))
                if down:  # as a robot's service does when it is down
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                # Answered as a WeCom/DingTalk robot does; chat relays ignore the body.
                reply = b'{"errcode": 0, "errmsg": "ok"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the demo's screen is the live view, not an access log

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, name="sink", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def posts(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]
