"""The exporter's HTTP endpoints: ``/metrics`` and a landing page at ``/``."""

from __future__ import annotations

import html
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from exporter import __version__

_LANDING = """<!doctype html>
<html><head><meta charset="utf-8"><title>GPU Reclaimer exporter</title></head>
<body>
<h1>GPU Reclaimer exporter</h1>
<p>Per-GPU and per-process GPU metrics from NVML and /proc (version {version}).</p>
<ul>
<li><a href="metrics">/metrics</a>: Prometheus metrics</li>
</ul>
<p>Node <code>{node}</code>, NVML source: <code>{source}</code>.</p>
</body></html>
"""

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def build_app(registry: CollectorRegistry, node: str, source: str) -> WsgiApp:
    metrics_app = make_wsgi_app(registry)
    landing = _LANDING.format(
        version=__version__, node=html.escape(node), source=html.escape(source)
    ).encode()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [landing]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics\n"]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
        pass


def serve(app: WsgiApp, host: str, port: int) -> WSGIServer:
    """Start serving in a daemon thread; returns the server (``server_port`` is bound)."""
    server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
