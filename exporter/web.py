"""The exporter's HTTP endpoints: ``/metrics`` and a landing page at ``/``."""

from __future__ import annotations

import asyncio
import gzip
import html
import resource
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.openmetrics.exposition import UNDERSCORES
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from exporter import __version__

_LANDING = """<!doctype html>
<html><head><meta charset="utf-8"><title>GPU Reclaimer exporter</title></head>
<body>
<h1>GPU Reclaimer exporter</h1>
<p>Per-GPU and per-process GPU metrics from NVML and /proc (version {version}).</p>
<ul>
<li><a href="metrics">/metrics</a>: Prometheus metrics</li>
<li><a href="-/healthy">/-/healthy</a>, <a href="-/ready">/-/ready</a>: for probes</li>
</ul>
<p>Node <code>{node}</code>, NVML source: <code>{source}</code>.</p>
</body></html>
"""

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


Render = Callable[..., bytes]  # render(openmetrics=bool, names=list|None) -> exposition


def build_app(
    registry: CollectorRegistry,
    node: str,
    source: str,
    render: Render | None = None,
    gzip_level: int = 1,
) -> WsgiApp:
    """The exporter's WSGI app. /metrics uses `render` (the collector's own exposition) for
    the Prometheus text and OpenMetrics formats (with `name[]` filters), and the library for
    other negotiated formats; gzip at `gzip_level`, only when asked."""
    library_app = make_wsgi_app(registry)
    landing = _LANDING.format(
        version=__version__, node=html.escape(node), source=html.escape(source)
    ).encode()

    def metrics(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if render is None or environ.get("REQUEST_METHOD") != "GET":
            return library_app(environ, start_response)
        names = parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        if encoder is generate_latest:
            body = render(openmetrics=False, names=names)
        elif _is_openmetrics_1(encoder):
            body = render(openmetrics=True, names=names)
        else:
            return library_app(environ, start_response)
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = gzip.compress(body, compresslevel=gzip_level)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path in ("/-/healthy", "/-/ready"):
            # Cheap on purpose: the process serves and its collector is built. Whether NVML
            # answers is the scrape's own `gpu_exporter_nvml_up`, not a reason to restart.
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n" if path == "/-/healthy" else b"ready\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [landing]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics\n"]

    return app


def _is_openmetrics_1(encoder: Callable[..., bytes]) -> bool:
    """The library's OpenMetrics 1.0.0 encoder with the default (underscores) escaping."""
    keywords = getattr(encoder, "keywords", None)
    return (
        getattr(encoder, "func", None) is openmetrics_latest
        and keywords is not None
        and keywords.get("version") == "1.0.0"
        and keywords.get("escaping") == UNDERSCORES
    )


HEAD_TIMEOUT = 10.0  # a request's line and headers must arrive within this
IDLE_TIMEOUT = 60.0  # a kept-alive connection may wait this long for its next request
MAX_HEAD_BYTES = 16 * 1024
MAX_CONNECTIONS = 4096


class MetricsServer:
    """HTTP/1.1 for the exporter's WSGI app on an asyncio event loop in one daemon thread.

    The loop reads each request head with a deadline before anything else happens, so an
    idle or trickling connection costs a file descriptor and a coroutine, never a thread
    or the scrape's turn; past MAX_CONNECTIONS the connection that has waited longest for
    its request is closed, so a flood cannot lock Prometheus out. The app itself (the
    collector) runs in one worker thread: scrapes are answered one at a time, as before.
    """

    def __init__(self, app: WsgiApp, host: str, port: int) -> None:
        self.app = app
        self._loop = asyncio.new_event_loop()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="scrape")
        self._waiting: dict[asyncio.StreamWriter, float] = {}
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._open = 0
        raise_open_files_limit()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._connection, host, port, backlog=1024)
        )
        self.server_port = int(self._server.sockets[0].getsockname()[1])
        self.host = host
        self._thread = threading.Thread(target=self._loop.run_forever, name="http", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        async def stop() -> None:
            self._server.close()
            # Closing each connection ends its coroutine by itself (a read sees EOF); only
            # one stuck past that is cancelled. None is left for the garbage collector to
            # run after the loop is closed.
            for writer in list(self._writers):
                writer.close()
            tasks = set(self._tasks)
            if tasks:
                _, stuck = await asyncio.wait(tasks, timeout=2)
                for task in stuck:
                    task.cancel()
                if stuck:
                    await asyncio.wait(stuck, timeout=1)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _make_room(self) -> None:
        if self._open < MAX_CONNECTIONS or not self._waiting:
            return
        oldest = min(self._waiting, key=self._waiting.__getitem__)
        self._waiting.pop(oldest, None)
        oldest.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        self._make_room()
        timeout = HEAD_TIMEOUT
        try:
            while True:
                self._waiting[writer] = time.monotonic()
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
                except (
                    TimeoutError,
                    asyncio.IncompleteReadError,
                    asyncio.LimitOverrunError,
                    ConnectionError,
                ):
                    return
                finally:
                    self._waiting.pop(writer, None)
                keep = await self._respond(head, writer)
                if not keep:
                    return
                timeout = IDLE_TIMEOUT
        except asyncio.CancelledError:
            return  # shutdown: end quietly (the stream's callback would log a cancelled task)
        finally:
            self._open -= 1
            self._waiting.pop(writer, None)
            self._writers.discard(writer)
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _respond(self, head: bytes, writer: asyncio.StreamWriter) -> bool:
        try:
            method, target, version, headers = _parse_head(head)
        except ValueError:
            writer.write(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            return False
        path, _, query = target.partition("?")
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": self.host,
            "SERVER_PORT": str(self.server_port),
            "SERVER_PROTOCOL": version,
            "wsgi.url_scheme": "http",
            **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()},
        }
        loop = asyncio.get_running_loop()
        status, response_headers, body = await loop.run_in_executor(
            self._executor, _call_wsgi, self.app, environ
        )
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        connection = "keep-alive" if keep else "close"
        lines = [
            f"HTTP/1.1 {status}",
            *(f"{k}: {v}" for k, v in response_headers),
            f"Content-Length: {len(body)}",
            f"Connection: {connection}",
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        try:
            await asyncio.wait_for(writer.drain(), HEAD_TIMEOUT)
        except (TimeoutError, ConnectionError):
            return False
        return keep


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    if len(head) > MAX_HEAD_BYTES:
        raise ValueError("request head too large")
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(version)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return method, target, version, headers


def _call_wsgi(app: WsgiApp, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        answer["status"], answer["headers"] = status, headers

    body = b"".join(app(environ, start_response))
    return answer["status"], answer["headers"], body


def raise_open_files_limit() -> None:
    """Idle connections each hold a descriptor: use the hard limit, not the usual 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve(app: WsgiApp, host: str, port: int) -> MetricsServer:
    """Start serving in a daemon thread; returns the server (``server_port`` is bound)."""
    return MetricsServer(app, host, port)
