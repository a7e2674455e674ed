"""The node agent's HTTP API: the `Node` interface of this node, for the central actuator.

Only this node's processes: a target naming another node is refused (403), whatever the
caller. The agent keeps no escalation state beyond its journal of steps already carried
out, so a retried or replayed signal request changes nothing. Every answer carries the
agent's clock, so the actuator can rebase the node's timestamps onto its own.

A plain WSGI application on Werkzeug's request, response and routing (no Flask): the agent
is the node's hands and loads nothing of the central service.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from pydantic import BaseModel, ValidationError
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from actuator.fleet import wire
from actuator.fleet.journal import SignalJournal
from actuator.models import SignalResult
from actuator.node import LocalNode
from exporter import procfs
from exporter.selfmetrics import TEXT_FORMAT, SelfCollector

MAX_BODY = 2**20


class _Request(Request):
    max_content_length = MAX_BODY


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _json(payload: dict[str, Any], code: int = 200) -> Response:
    return Response(json.dumps(payload), status=code, mimetype="application/json")


def _error(code: int, message: str) -> Response:
    return _json({"error": message}, code)


_ROUTES = Map(
    [
        Rule("/-/healthy", endpoint="healthy", methods=["GET"]),
        Rule("/-/ready", endpoint="ready", methods=["GET"]),
        Rule("/metrics", endpoint="metrics", methods=["GET"]),
        Rule("/v1/node", endpoint="about", methods=["GET"]),
        Rule("/v1/inspect", endpoint="inspect", methods=["POST"]),
        Rule("/v1/inspect-many", endpoint="inspect_many", methods=["POST"]),
        Rule("/v1/alive", endpoint="alive", methods=["POST"]),
        Rule("/v1/gpus/<uuid>/processes", endpoint="gpu_processes", methods=["GET"]),
        Rule("/v1/slurm/jobs/<job>/processes", endpoint="job_processes", methods=["GET"]),
        Rule("/v1/monitored", endpoint="monitored", methods=["GET"]),
        Rule("/v1/signal", endpoint="send", methods=["POST"]),
        Rule("/v1/rehearse", endpoint="rehearse", methods=["POST"]),
        Rule("/v1/checkpoint", endpoint="checkpoint", methods=["POST"]),
    ]
)


class AgentApp:
    """The agent's WSGI application: one handler per route, requests taking turns on the
    node (one node, one set of pidfds)."""

    def __init__(
        self, node: LocalNode, journal: SignalJournal, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.node, self.journal, self.clock = node, journal, clock
        self.lock = threading.Lock()
        self.boot_id = procfs.boot_id()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SelfCollector("gpu_reclaimer_agent"))
        info = Gauge(
            "gpu_reclaimer_agent_info",
            "The node this agent serves.",
            ["node", "boot_id"],
            registry=self.registry,
        )
        info.labels(node.name, self.boot_id).set(1)
        self.requests_total = Counter(
            "gpu_reclaimer_agent_requests_total",
            "Agent API requests by endpoint and code.",
            ["endpoint", "code"],
            registry=self.registry,
        )
        self.signals_total = Counter(
            "gpu_reclaimer_agent_signals_total",
            "Signals this agent sent, by signal.",
            ["signal"],
            registry=self.registry,
        )

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = _Request(environ)
        endpoint = "none"
        try:
            endpoint, args = _ROUTES.bind_to_environ(environ).match()
            response = getattr(self, f"on_{endpoint}")(request, **args)
        except _Refused as exc:
            response = _error(exc.code, exc.message)
        except HTTPException as exc:  # unknown path, wrong method, body too large
            response = _error(exc.code or 400, exc.description or exc.name)
        with contextlib.suppress(Exception):
            self.requests_total.labels(endpoint, str(response.status_code)).inc()
        return response(environ, start_response)

    # -- helpers -------------------------------------------------------------------------

    def body(self, request: Request, model: type[BaseModel]) -> Any:
        data = request.get_json(silent=True)
        if data is None:
            raise _Refused(400, "the body must be JSON")
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise _Refused(422, f"invalid request: {exc.errors(include_url=False)[:3]}") from None

    def ours(self, node_name: str) -> None:
        if node_name != self.node.name:
            raise _Refused(403, f"this agent serves node {self.node.name!r}, not {node_name!r}")

    def answer(self, payload: dict[str, Any]) -> Response:
        return _json({"node": self.node.name, "now": self.clock(), **payload})

    # -- routes --------------------------------------------------------------------------

    def on_healthy(self, _request: Request) -> Response:
        return self.answer({"status": "ok"})

    def on_ready(self, _request: Request) -> Response:
        with self.lock:
            count = self.node.monitored_count()
        if count is None:
            return _error(503, "NVML is not answering")
        return self.answer({"status": "ready", "monitored": count})

    def on_metrics(self, _request: Request) -> Response:
        return Response(generate_latest(self.registry), headers={"Content-Type": TEXT_FORMAT})

    def on_about(self, _request: Request) -> Response:
        return self.answer({"protocol": wire.PROTOCOL, "boot_id": self.boot_id})

    def on_inspect(self, request: Request) -> Response:
        req: wire.InspectRequest = self.body(request, wire.InspectRequest)
        self.ours(req.target.node)
        with self.lock:
            live = self.node.inspect(req.target)
        return self.answer({"live": wire.dump_live(live)})

    def on_inspect_many(self, request: Request) -> Response:
        """A node's due re-checks in one request: one round trip, not one per case."""
        req: wire.InspectManyRequest = self.body(request, wire.InspectManyRequest)
        for target in req.targets:
            self.ours(target.node)
        with self.lock:  # the node's batch: what is one figure for the node is read once
            lives = self.node.inspect_many(req.targets)
        return self.answer({"lives": [wire.dump_live(live) for live in lives]})

    def on_alive(self, request: Request) -> Response:
        req: wire.AliveRequest = self.body(request, wire.AliveRequest)
        with self.lock:
            members = self.node.alive(req.members)
        return self.answer({"members": wire.dump_members(members)})

    def on_gpu_processes(self, _request: Request, uuid: str) -> Response:
        with self.lock:
            procs = self.node.gpu_processes(uuid)
        listed = None if procs is None else {str(pid): mem for pid, mem in procs.items()}
        return self.answer({"processes": listed})

    def on_job_processes(self, _request: Request, job: str) -> Response:
        if not job.isascii() or not job.isdigit() or len(job) > 12:
            raise _Refused(422, "not a Slurm job id")
        with self.lock:
            found = self.node.job_processes(job)
        listed = None if found is None else [wire.dump_target(t) for t in found]
        return self.answer({"processes": listed})

    def on_monitored(self, _request: Request) -> Response:
        with self.lock:
            return self.answer({"count": self.node.monitored_count()})

    def on_send(self, request: Request) -> Response:
        req: wire.SignalRequest = self.body(request, wire.SignalRequest)
        self.ours(req.target.node)
        if req.dry_run:
            # Nothing is sent, so asking again changes nothing either: a rehearsal takes no
            # place in the journal (two fsync'd commits per case in an observe-mode storm).
            results = self.node.signal_tree(req.target, req.members, req.signum, dry_run=True)
            return self.answer({"results": wire.dump_results(results), "replayed": False})
        key = f"{req.key}:{req.signal}:real"
        with self.lock:
            earlier = self.journal.claim(key)
            if earlier is not None:
                return self.answer({"results": wire.dump_results(earlier), "replayed": True})
            results = self.node.signal_tree(
                req.target, req.members, req.signum, dry_run=req.dry_run
            )
            self.journal.finish(key, results)
        for r in results:
            if r.sent:
                self.signals_total.labels(r.signal).inc()
        return self.answer({"results": wire.dump_results(results), "replayed": False})

    def on_rehearse(self, request: Request) -> Response:
        """A node's rehearsed steps together: each tree verified as for a real signal,
        nothing sent, nothing journalled (asking again changes nothing)."""
        req: wire.RehearseRequest = self.body(request, wire.RehearseRequest)
        for step in req.steps:
            self.ours(step.target.node)
        answers = [
            wire.dump_results(
                self.node.signal_tree(step.target, step.members, step.signum, dry_run=True)
            )
            for step in req.steps
        ]
        return self.answer({"results": answers})

    def on_checkpoint(self, request: Request) -> Response:
        """Suspend or resume one process through the node's checkpointer, once per key."""
        req: wire.CheckpointRequest = self.body(request, wire.CheckpointRequest)
        self.ours(req.target.node)
        key = f"{req.key}:{req.call}"
        with self.lock:
            earlier = self.journal.claim(key)
            if earlier is not None:
                done = earlier[0] if earlier else None
                return self.answer(
                    {
                        "ok": bool(done and done.sent),
                        "state": "",  # read afresh by the next re-check
                        "detail": done.detail if done else "interrupted: not carried out again",
                        "replayed": True,
                    }
                )
            if req.call == "suspend":
                result = self.node.suspend(req.target, req.lock_timeout)
            else:
                result = self.node.resume(req.target, need=req.need_bytes, avoid=req.avoid)
            name = req.call.upper()
            self.journal.finish(key, [SignalResult(req.target.pid, name, result.ok, result.detail)])
        if result.ok:
            self.signals_total.labels(name).inc()
        return self.answer(
            {
                "ok": result.ok,
                "state": result.state,
                "detail": result.detail,
                "no_room": result.no_room,
                "onto": result.onto,
                "replayed": False,
            }
        )


def create_agent_app(
    node: LocalNode, journal: SignalJournal, *, clock: Callable[[], float] = time.time
) -> AgentApp:
    return AgentApp(node, journal, clock=clock)
