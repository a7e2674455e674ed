"""The node agent's HTTP API: the `Node` interface of this node, for the central actuator.

Only this node's processes: a target naming another node is refused (403), whatever the
caller. The agent keeps no escalation state beyond its journal of steps already carried
out, so a retried or replayed signal request changes nothing. Every answer carries the
agent's clock, so the actuator can rebase the node's timestamps onto its own.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, jsonify, request
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from pydantic import BaseModel, ValidationError

from actuator.fleet import wire
from actuator.fleet.journal import SignalJournal
from actuator.node import LocalNode
from exporter import procfs


def _error(code: int, message: str) -> tuple[Response, int]:
    return jsonify({"error": message}), code


def create_agent_app(
    node: LocalNode, journal: SignalJournal, *, clock: Callable[[], float] = time.time
) -> Flask:
    app = Flask("agent")
    app.config["MAX_CONTENT_LENGTH"] = 2**20
    app.json.sort_keys = False  # type: ignore[attr-defined]
    lock = threading.Lock()  # one node, one set of pidfds: requests take turns
    boot_id = procfs.boot_id()
    registry = CollectorRegistry(auto_describe=False)
    info = Gauge("gpu_reclaimer_agent_info", "The node this agent serves.", ["node", "boot_id"],
                 registry=registry)  # fmt: skip
    info.labels(node.name, boot_id).set(1)
    requests_total = Counter(
        "gpu_reclaimer_agent_requests_total", "Agent API requests by endpoint and code.",
        ["endpoint", "code"], registry=registry,
    )  # fmt: skip
    signals_total = Counter(
        "gpu_reclaimer_agent_signals_total", "Signals this agent sent, by signal.", ["signal"],
        registry=registry,
    )  # fmt: skip

    def body(model: type[BaseModel]) -> Any:
        data = request.get_json(silent=True)
        if data is None:
            raise _Refused(400, "the body must be JSON")
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise _Refused(422, f"invalid request: {exc.errors(include_url=False)[:3]}") from None

    def ours(node_name: str) -> None:
        if node_name != node.name:
            raise _Refused(403, f"this agent serves node {node.name!r}, not {node_name!r}")

    def answer(payload: dict[str, Any]) -> Response:
        return jsonify({"node": node.name, "now": clock(), **payload})

    class _Refused(Exception):
        def __init__(self, code: int, message: str) -> None:
            super().__init__(message)
            self.code, self.message = code, message

    @app.errorhandler(_Refused)
    def refused(exc: _Refused) -> tuple[Response, int]:
        return _error(exc.code, exc.message)

    @app.after_request
    def counted(resp: Response) -> Response:
        with contextlib.suppress(Exception):
            requests_total.labels(request.endpoint or "none", str(resp.status_code)).inc()
        return resp

    @app.get("/-/healthy")
    def healthy() -> Response:
        return answer({"status": "ok"})

    @app.get("/-/ready")
    def ready() -> tuple[Response, int]:
        with lock:
            count = node.monitored_count()
        if count is None:
            return _error(503, "NVML is not answering")
        return answer({"status": "ready", "monitored": count}), 200

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), mimetype="text/plain; version=0.0.4")

    @app.get("/v1/node")
    def about() -> Response:
        return answer({"protocol": wire.PROTOCOL, "boot_id": boot_id})

    @app.post("/v1/inspect")
    def inspect() -> Response:
        req: wire.InspectRequest = body(wire.InspectRequest)
        ours(req.target.node)
        with lock:
            live = node.inspect(req.target)
        return answer({"live": wire.dump_live(live)})

    @app.post("/v1/alive")
    def alive() -> Response:
        req: wire.AliveRequest = body(wire.AliveRequest)
        with lock:
            members = node.alive(req.members)
        return answer({"members": wire.dump_members(members)})

    @app.get("/v1/gpus/<uuid>/processes")
    def gpu_processes(uuid: str) -> Response:
        with lock:
            procs = node.gpu_processes(uuid)
        listed = None if procs is None else {str(pid): mem for pid, mem in procs.items()}
        return answer({"processes": listed})

    @app.get("/v1/slurm/jobs/<job>/processes")
    def job_processes(job: str) -> Response:
        if not job.isascii() or not job.isdigit() or len(job) > 12:
            raise _Refused(422, "not a Slurm job id")
        with lock:
            found = node.job_processes(job)
        listed = None if found is None else [wire.dump_target(t) for t in found]
        return answer({"processes": listed})

    @app.get("/v1/monitored")
    def monitored() -> Response:
        with lock:
            return answer({"count": node.monitored_count()})

    @app.post("/v1/signal")
    def send() -> Response:
        req: wire.SignalRequest = body(wire.SignalRequest)
        ours(req.target.node)
        key = f"{req.key}:{req.signal}:{'dry' if req.dry_run else 'real'}"
        with lock:
            earlier = journal.claim(key)
            if earlier is not None:
                return answer({"results": wire.dump_results(earlier), "replayed": True})
            results = node.signal_tree(req.target, req.members, req.signum, dry_run=req.dry_run)
            journal.finish(key, results)
        for r in results:
            if r.sent:
                signals_total.labels(r.signal).inc()
        return answer({"results": wire.dump_results(results), "replayed": False})

    return app
