"""The HTTP API (Flask): the Alertmanager webhook, cases, audit, breaker, metrics, health."""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import time
from typing import Any

from flask import Flask, Response, g, jsonify, request
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from actuator import operations
from actuator.audit import AuditError, Event
from actuator.metrics import ActuatorCollector
from actuator.models import (
    AlertmanagerPayload,
    State,
    parse_decimal,
    reject_duplicate_keys,
)
from actuator.operations import HTTP_STATUS, MAX_SNOOZE, Refused
from actuator.operators import AuthError, Principal, Role
from actuator.policy import Duration
from actuator.runtime import Runtime
from actuator.store import StoreUnavailable
from actuator.why import explain
from exporter.procfs import PID_MAX_LIMIT
from exporter.selfmetrics import TEXT_FORMAT, SelfCollector

log = logging.getLogger(__name__)
CASES_ARGS = frozenset({"state", "node", "user", "pid", "limit"})
AUDIT_ARGS = frozenset({"limit", "case", "before"})


class SnoozeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    duration: Duration = Field(gt=0, le=MAX_SNOOZE)
    reason: str = Field("", max_length=500)
    by: str = Field("", max_length=100)


class BreakerReset(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=500)
    by: str = Field("", max_length=100)


def _unknown_args(allowed: frozenset[str]) -> tuple[Response, int] | None:
    """A query parameter the endpoint does not know is an error, never silently ignored
    (a filter that is dropped would answer with everything)."""
    unknown = sorted(set(request.args) - allowed)
    if not unknown:
        return None
    return _error(400, f"unknown query parameter(s) {unknown}", allowed=sorted(allowed))


def _error(code: int, message: str, **extra: Any) -> tuple[Response, int]:
    return jsonify({"error": message, **extra}), code


def _validation_details(exc: ValidationError) -> list[dict[str, Any]]:
    # Never echo inputs back: locations and messages only.
    return [
        {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"]}
        for err in exc.errors(include_url=False, include_input=False)[:20]
    ]


def _reconciler_stalled(rt: Runtime) -> str | None:
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


# The shared bearer token is a principal too: whoever holds it, the audit names it.
SHARED_TOKEN = Principal(
    name="token",
    subject="token",
    roles=frozenset({"admin"}),
    issuer="shared bearer token",
    method="token",
)


def create_app(rt: Runtime) -> Flask:
    app = Flask("actuator")
    app.config["MAX_CONTENT_LENGTH"] = rt.config.server.max_body
    app.json.sort_keys = False  # type: ignore[attr-defined]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ActuatorCollector(rt.store))
    registry.register(SelfCollector("gpu_reclaimer"))  # build info; this worker's process_*
    expected = rt.token.encode()

    def count(code: int) -> None:
        with contextlib.suppress(StoreUnavailable):
            rt.store.count_request(code)

    def check_auth() -> tuple[Response, int] | None:
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return auth_failed("missing", "missing bearer token")
        if not hmac.compare_digest(given.strip().encode(), expected):
            return auth_failed("invalid", "invalid token", 403)
        g.principal = SHARED_TOKEN
        return None

    def auth_failed(reason: str, message: str, code: int = 401) -> tuple[Response, int]:
        """Counted and audited (never the token itself)."""
        with contextlib.suppress(StoreUnavailable):
            rt.store.count("auth_failures", reason)
        with contextlib.suppress(AuditError):
            rt.audit.write(
                {
                    "event": Event.AUTH_FAILED,
                    "reason": reason,
                    "path": request.path,
                    "method": request.method,
                    "remote": request.remote_addr,
                }
            )
        resp, status = _error(code, message)
        if code == 401:
            resp.headers["WWW-Authenticate"] = 'Bearer realm="gpu-reclaimer"'
        return resp, status

    def check_person(role: Role) -> tuple[Response, int] | None:
        """With operators configured: a person (OIDC token or directory password) with the
        role, not the shared token."""
        assert rt.operators is not None
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        given = given.strip()
        if scheme.lower() not in ("bearer", "basic") or not given:
            return auth_failed("missing", f"sign in: {rt.operators.schemes} is needed")
        if hmac.compare_digest(given.encode(), expected):
            return auth_failed(
                "shared_token",
                "the shared token is for Alertmanager's alerts only; people sign in as themselves",
                403,
            )
        try:
            if scheme.lower() == "bearer":
                principal = rt.operators.bearer(given)
            else:
                auth = request.authorization
                if auth is None or auth.type != "basic" or auth.username is None:
                    return auth_failed("invalid", "malformed Basic credentials")
                principal = rt.operators.basic(auth.username, auth.password or "")
        except AuthError as exc:
            return auth_failed(exc.reason, str(exc))
        if not principal.may(role):
            return auth_failed("role", f"{principal.name} does not have the {role} role", 403)
        g.principal = principal
        return None

    # Who may do what, with operators configured (endpoint -> role).
    person_roles: dict[str, Role] = {
        "cases": "sre",
        "case": "sre",
        "why": "sre",
        "snooze": "sre",
        "audit": "sre",
        "breaker_reset": "admin",
        "repeat_reset": "admin",
    }

    @app.before_request
    def _auth() -> tuple[Response, int] | None:
        if request.path in ("/metrics", "/-/healthy", "/-/ready"):
            return None
        if rt.links is not None and request.path.startswith("/keep/"):
            return None  # the signed link is the credential (actuator/keep_page.py)
        if rt.pictures is not None and request.path.startswith("/evidence/"):
            return None  # so is a picture's (actuator/evidence/page.py)
        if rt.operators is not None and request.path != "/api/v1/alerts":
            return check_person(person_roles.get(request.endpoint or "", "admin"))
        denied = check_auth()
        if denied is not None and request.path == "/api/v1/alerts":
            count(denied[1])
        return denied

    def actor(declared: str) -> str:
        """Who did it, for the audit: the authenticated principal (a person, or "token" for
        the shared bearer token); what the caller typed in `by` is kept beside it, never
        recorded as who acted."""
        principal: Principal = g.get("principal") or SHARED_TOKEN
        said = f", said {declared!r}" if declared and declared != principal.name else ""
        if principal is SHARED_TOKEN:
            return f"token (the shared bearer token){said}"
        return f"{principal.name} ({principal.method} {principal.issuer}){said}"

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> tuple[Response, int]:
        code = exc.code or 500
        if request.path == "/api/v1/alerts":
            count(code)
        return _error(code, exc.description or exc.name)

    @app.errorhandler(StoreUnavailable)
    def _store_down(exc: StoreUnavailable) -> tuple[Response, int]:
        log.error("store unavailable: %s", exc)
        return _error(503, "store unavailable, retry later")

    @app.errorhandler(AuditError)
    def _audit_down(exc: AuditError) -> tuple[Response, int]:
        log.error("audit log: %s", exc)
        return _error(503, f"audit log unavailable, retry later: {exc}")

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> tuple[Response, int]:
        """Never a bare 500: a dependency that failed in a way nobody foresaw is 'away'
        (503, with the reason, and the traceback in the log for the SRE)."""
        log.exception("%s %s failed", request.method, request.path)
        return _error(503, f"unavailable: {type(exc).__name__}: {exc}"[:300])

    # -- webhook ------------------------------------------------------------------------

    @app.post("/api/v1/alerts")
    def alerts() -> tuple[Response, int]:
        started = time.perf_counter()
        if request.mimetype != "application/json":
            count(415)
            return _error(415, "Content-Type must be application/json")
        try:
            raw = request.get_data(cache=False)
        except RequestEntityTooLarge:
            count(413)
            return _error(413, f"body larger than {rt.config.server.max_body} bytes")
        try:
            data = json.loads(raw, object_pairs_hook=reject_duplicate_keys)
        except (ValueError, RecursionError) as exc:
            count(400)
            return _error(400, f"body is not valid JSON: {str(exc)[:200]}")
        try:
            payload = AlertmanagerPayload.model_validate(data)
        except ValidationError as exc:
            count(422)
            return _error(422, "not an Alertmanager v4 payload", details=_validation_details(exc))
        ingest = operations.receive_alerts(rt, payload)
        return jsonify(
            {
                "status": "accepted",
                "received": ingest.received,
                "recorded": ingest.recorded,
                "ignored": ingest.ignored,
                "rejected": ingest.rejected,
                "truncated": payload.truncatedAlerts,
                "took_ms": round((time.perf_counter() - started) * 1000, 3),
            }
        ), 200

    # -- cases --------------------------------------------------------------------------

    @app.get("/api/v1/cases")
    def cases() -> tuple[Response, int]:
        unknown = _unknown_args(CASES_ARGS)
        if unknown is not None:
            return unknown
        state = request.args.get("state")
        if state is not None and state not in State.__members__.values():
            return _error(400, f"unknown state {state!r}", states=[str(s) for s in State])
        try:
            limit = int(request.args.get("limit", "100"))
        except ValueError:
            return _error(400, "limit must be an integer")
        if not 1 <= limit <= 1000:
            return _error(400, "limit must be between 1 and 1000")
        pid_arg = request.args.get("pid")
        pid = parse_decimal(pid_arg, 0, PID_MAX_LIMIT) if pid_arg is not None else None
        if pid_arg is not None and pid is None:
            return _error(400, f"pid must be a process id: {pid_arg[:64]!r}")
        found = rt.store.list_cases(
            state=state,
            node=request.args.get("node"),
            user=request.args.get("user"),
            pid=pid,
            limit=limit,
        )
        return jsonify({"cases": [c.to_json() for c in found]}), 200

    @app.get("/api/v1/cases/<int:case_id>")
    def case(case_id: int) -> tuple[Response, int]:
        found = rt.store.get_case(case_id)
        if found is None:
            return _error(404, f"no case {case_id}")
        body = found.to_json()
        body["timeline"] = rt.store.timeline(case_id)
        body["signals"] = rt.store.signals_for(case_id)
        return jsonify(body), 200

    @app.get("/api/v1/cases/<int:case_id>/why")
    def why(case_id: int) -> tuple[Response, int]:
        found = rt.store.get_case(case_id)
        if found is None:
            return _error(404, f"no case {case_id}")
        return jsonify(explain(found, rt.store.timeline(case_id)).to_json()), 200

    @app.post("/api/v1/cases/<int:case_id>/snooze")
    def snooze(case_id: int) -> tuple[Response, int]:
        try:
            body = SnoozeRequest.model_validate(request.get_json(force=True, silent=False))
        except ValidationError as exc:
            return _error(422, "invalid snooze request", details=_validation_details(exc))
        result = operations.snooze(
            rt, case_id, body.duration, actor(body.by), body.reason, body.model_dump()
        )
        if isinstance(result, Refused):
            return _error(HTTP_STATUS[result.why], result.detail)
        return jsonify(result.to_json()), 200

    if rt.links is not None:
        from actuator.keep_page import keep_blueprint

        app.register_blueprint(keep_blueprint(rt, rt.links, rt.config.notifier.keep_max))

    if rt.pictures is not None:
        from actuator.evidence.page import picture_blueprint

        app.register_blueprint(picture_blueprint(rt.store, rt.pictures))

    @app.get("/api/v1/audit")
    def audit() -> tuple[Response, int]:
        unknown = _unknown_args(AUDIT_ARGS)
        if unknown is not None:
            return unknown
        try:
            limit = min(max(int(request.args.get("limit", "100")), 1), 10000)
            case_arg = request.args.get("case")
            case_id = int(case_arg) if case_arg is not None else None
            before_arg = request.args.get("before")
            before = int(before_arg) if before_arg is not None else None
        except ValueError:
            return _error(400, "limit, case and before must be integers")
        if before is not None and before < 0:
            return _error(400, "before must be >= 0")
        records, earlier = rt.audit.page(limit, case_id, before)
        # `before`: pass it back for the page before this one (null: start of the file).
        return jsonify({"records": records, "before": earlier}), 200

    @app.post("/api/v1/breaker/reset")
    def breaker_reset() -> tuple[Response, int]:
        data = request.get_json(silent=True) if request.content_length else {}
        try:
            body = BreakerReset.model_validate(data or {})
        except ValidationError as exc:
            return _error(422, "invalid reset request", details=_validation_details(exc))
        result = operations.reset_breaker(rt, actor(body.by), body.reason)
        if isinstance(result, Refused):
            return _error(HTTP_STATUS[result.why], result.detail)
        return jsonify({"open": False, "was_open": result.was_open, "opened_at": result.since}), 200

    @app.post("/api/v1/owners/<user>/repeat-reset")
    def repeat_reset(user: str) -> tuple[Response, int]:
        data = request.get_json(silent=True) if request.content_length else {}
        try:
            body = BreakerReset.model_validate(data or {})  # the same {reason, by}
        except ValidationError as exc:
            return _error(422, "invalid reset request", details=_validation_details(exc))
        if not user or len(user) > 64:
            return _error(400, "a user name, at most 64 characters")
        result = operations.reset_repeats(rt, user, actor(body.by), body.reason)
        if isinstance(result, Refused):
            return _error(HTTP_STATUS[result.why], result.detail)
        return jsonify({"user": user, "reclaims_before": result, "count": 0}), 200

    # -- metrics and health -------------------------------------------------------------

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), headers={"Content-Type": TEXT_FORMAT})

    @app.get("/-/healthy")
    def healthy() -> tuple[Response, int]:
        return jsonify({"healthy": True}), 200

    @app.get("/-/ready")
    def ready() -> tuple[Response, int]:
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
        stalled = _reconciler_stalled(rt)
        if stalled:
            reasons.append(stalled)
        if reasons:
            return jsonify({"ready": False, "reasons": reasons}), 503
        return jsonify({"ready": True, "mode": str(rt.config.mode)}), 200

    return app
