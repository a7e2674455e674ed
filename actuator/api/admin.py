"""The audit log's pages, and the resets an admin makes: the circuit breaker and an
owner's repeat count (`operations.reset_breaker`, `operations.reset_repeats`)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actuator import operations
from actuator.api.auth import Auth
from actuator.api.responses import error, unknown_args, validation_details
from actuator.operations import HTTP_STATUS, Refused
from actuator.runtime import Runtime

AUDIT_ARGS = frozenset({"limit", "case", "before"})


class BreakerResetRequest(BaseModel):
    """The breaker reset's why and who."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=500)
    by: str = Field("", max_length=100)


class RepeatResetRequest(BaseModel):
    """A repeat count's reset: an SRE's decision about one owner, so its why is required."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=500)
    by: str = Field("", max_length=100)


def admin_blueprint(rt: Runtime, auth: Auth) -> Blueprint:
    api = Blueprint("admin", __name__)

    @api.get("/api/v1/audit")
    def audit() -> tuple[Response, int]:
        unknown = unknown_args(AUDIT_ARGS)
        if unknown is not None:
            return unknown
        try:
            limit = min(max(int(request.args.get("limit", "100")), 1), 10000)
            case_arg = request.args.get("case")
            case_id = int(case_arg) if case_arg is not None else None
            before_arg = request.args.get("before")
            before = int(before_arg) if before_arg is not None else None
        except ValueError:
            return error(400, "limit, case and before must be integers")
        if before is not None and before < 0:
            return error(400, "before must be >= 0")
        records, earlier = rt.audit.page(limit, case_id, before)
        # `before`: pass it back for the page before this one (null: start of the file).
        return jsonify({"records": records, "before": earlier}), 200

    @api.post("/api/v1/breaker/reset")
    def breaker_reset() -> tuple[Response, int]:
        data = request.get_json(silent=True) if request.content_length else {}
        try:
            body = BreakerResetRequest.model_validate(data or {})
        except ValidationError as exc:
            return error(422, "invalid reset request", details=validation_details(exc))
        result = operations.reset_breaker(rt, auth.actor(body.by), body.reason)
        if isinstance(result, Refused):
            return error(HTTP_STATUS[result.why], result.detail)
        return jsonify({"open": False, "was_open": result.was_open, "opened_at": result.since}), 200

    @api.post("/api/v1/owners/<user>/repeat-reset")
    def repeat_reset(user: str) -> tuple[Response, int]:
        data = request.get_json(silent=True) if request.content_length else {}
        try:
            body = RepeatResetRequest.model_validate(data or {})
        except ValidationError as exc:
            return error(422, "invalid reset request", details=validation_details(exc))
        if not user or len(user) > 64:
            return error(400, "a user name, at most 64 characters")
        result = operations.reset_repeats(rt, user, auth.actor(body.by), body.reason)
        if isinstance(result, Refused):
            return error(HTTP_STATUS[result.why], result.detail)
        return jsonify({"user": user, "reclaims_before": result, "count": 0}), 200

    return api
