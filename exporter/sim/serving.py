"""A simulated inference service: real HTTP on a real socket, GPU work that follows requests.

`sim run --serve PORT` starts this beside the phase program. A request names how many
tokens it brings and wants (`{"prompt_tokens": N, "max_tokens": M}`, the Azure LLM
inference trace's ContextTokens and GeneratedTokens); the prompt's text arrives as the
request's body and the generated text goes back as the answer, so the bytes on the
connection are a real request's. While a request is in flight the workload reports SM
work, and handling it costs CPU (tokenising, sampling), so utilisation and CPU follow the
requests served. Between requests the service sits quiet, as real ones do.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BYTES_PER_TOKEN = 4  # text, roughly
SECONDS_PER_TOKEN = 0.005  # generation time per token (a fast, small model)
MAX_SECONDS = 5.0  # one request holds the GPU at most this long here
MAX_BODY = 8 * 1024 * 1024
CPU_SHARE = 0.2  # of a request's time spent on the CPU


class InferenceServer:
    """The HTTP side of a serving workload (a thread); `busy()` says whether a request was
    in flight within the last `window` seconds."""

    def __init__(self, address: str, port: int) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._last_done = float("-inf")
        self.served = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: one connection serves many requests

            def do_GET(self) -> None:
                self._answer(200, {"status": "ok", "served": server.served})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 <= length <= MAX_BODY:
                    self._answer(413, {"error": "request too large"})
                    return
                body = self.rfile.read(length)
                try:
                    asked = json.loads(body or b"{}")
                    tokens = int(asked.get("max_tokens", 16))
                except (ValueError, TypeError, AttributeError):
                    self._answer(400, {"error": "a JSON object with max_tokens"})
                    return
                self._answer(200, server.generate(max(0, tokens)))

            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a quiet service: no access log (its evidence is its network)

        self.httpd = ThreadingHTTPServer((address, port), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])

    def start(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, name="serve", daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def generate(self, tokens: int) -> dict[str, Any]:
        with self._lock:
            self._in_flight += 1
        try:
            seconds = min(MAX_SECONDS, tokens * SECONDS_PER_TOKEN)
            _burn(seconds * CPU_SHARE)
            time.sleep(seconds * (1 - CPU_SHARE))
            return {"text": "x" * (tokens * BYTES_PER_TOKEN), "generated_tokens": tokens}
        finally:
            with self._lock:
                self._in_flight -= 1
                self._last_done = time.monotonic()
                self.served += 1

    def busy(self, window: float) -> bool:
        with self._lock:
            return self._in_flight > 0 or time.monotonic() - self._last_done < window


def _burn(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    value = 0
    while time.monotonic() < deadline:
        value = (value * 31 + 7) % 1_000_003
