"""/metrics (read from the store at scrape time: the same answer from every worker) and the
probes: /-/healthy (the process serves) and /-/ready (it can record and decide)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from prometheus_client import CollectorRegistry, generate_latest

from actuator.metrics import ActuatorCollector
from actuator.runtime import Runtime
from actuator.store import StoreUnavailable
from exporter.selfmetrics import TEXT_FORMAT, SelfCollector


def reconciler_stalled(rt: Runtime) -> str | None:
    """Why no reconciler is making progress, or None (the same answer from every worker)."""
    limit = rt.config.reconciler.stall_after
    try:
        progress = rt.store.progress()
    except StoreUnavailable:
        return None  # reported as the store's own problem
    now = rt.mono()
    if progress is None or progress[2] is None:
        if now - rt.started_mono <= limit:
            return None  # just started
        return f"no reconciler has finished a pass in {limit:g}s (nothing is being advanced)"
    holder, _, progressed = progress
    assert progressed is not None  # checked above
    if now - progressed > limit:
        return (
            f"the reconciler ({holder}) last finished a pass {now - progressed:.0f}s ago "
            f"(limit {limit:g}s): cases are not being advanced"
        )
    return None


def not_ready(rt: Runtime) -> list[str]:
    """Every reason this worker cannot do its work now (empty: ready)."""
    reasons = []
    try:
        rt.store.ping()
    except StoreUnavailable as exc:
        reasons.append(str(exc))
    failed = rt.store.write_problem()  # reads work on a full volume; commits do not
    if failed:
        reasons.append(failed + " (webhooks answer 503, decisions wait)")
    problem = rt.audit.check_writable()
    if problem:
        reasons.append(problem + " (nothing will be signalled)")
    stalled = reconciler_stalled(rt)
    if stalled:
        reasons.append(stalled)
    return reasons


def health_blueprint(rt: Runtime) -> Blueprint:
    api = Blueprint("health", __name__)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ActuatorCollector(rt.store))
    registry.register(SelfCollector("gpu_reclaimer"))  # build info; this worker's process_*

    @api.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), headers={"Content-Type": TEXT_FORMAT})

    @api.get("/-/healthy")
    def healthy() -> tuple[Response, int]:
        return jsonify({"healthy": True}), 200

    @api.get("/-/ready")
    def ready() -> tuple[Response, int]:
        reasons = not_ready(rt)
        if reasons:
            return jsonify({"ready": False, "reasons": reasons}), 503
        return jsonify({"ready": True, "mode": str(rt.config.mode)}), 200

    return api
