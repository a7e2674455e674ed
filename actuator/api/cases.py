"""The cases: list and filter them, one case with its timeline and signals, why it is where
it is, and an SRE's snooze (`operations.snooze`)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actuator import operations
from actuator.api.auth import Auth
from actuator.api.responses import error, unknown_args, validation_details
from actuator.models import State, parse_decimal
from actuator.operations import HTTP_STATUS, MAX_SNOOZE, Refused
from actuator.policy import Duration
from actuator.runtime import Runtime
from actuator.why import explain
from exporter.procfs import PID_MAX_LIMIT

CASES_ARGS = frozenset({"state", "node", "user", "pid", "limit"})


class SnoozeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    duration: Duration = Field(gt=0, le=MAX_SNOOZE)
    reason: str = Field("", max_length=500)
    by: str = Field("", max_length=100)


def cases_blueprint(rt: Runtime, auth: Auth) -> Blueprint:
    api = Blueprint("cases", __name__)

    @api.get("/api/v1/cases")
    def cases() -> tuple[Response, int]:
        unknown = unknown_args(CASES_ARGS)
        if unknown is not None:
            return unknown
        state = request.args.get("state")
        if state is not None and state not in State.__members__.values():
            return error(400, f"unknown state {state!r}", states=[str(s) for s in State])
        try:
            limit = int(request.args.get("limit", "100"))
        except ValueError:
            return error(400, "limit must be an integer")
        if not 1 <= limit <= 1000:
            return error(400, "limit must be between 1 and 1000")
        pid_arg = request.args.get("pid")
        pid = parse_decimal(pid_arg, 0, PID_MAX_LIMIT) if pid_arg is not None else None
        if pid_arg is not None and pid is None:
            return error(400, f"pid must be a process id: {pid_arg[:64]!r}")
        found = rt.store.list_cases(
            state=state,
            node=request.args.get("node"),
            user=request.args.get("user"),
            pid=pid,
            limit=limit,
        )
        return jsonify({"cases": [c.to_json() for c in found]}), 200

    @api.get("/api/v1/cases/<int:case_id>")
    def case(case_id: int) -> tuple[Response, int]:
        found = rt.store.get_case(case_id)
        if found is None:
            return error(404, f"no case {case_id}")
        body = found.to_json()
        body["timeline"] = rt.store.timeline(case_id)
        body["signals"] = rt.store.signals_for(case_id)
        return jsonify(body), 200

    @api.get("/api/v1/cases/<int:case_id>/why")
    def why(case_id: int) -> tuple[Response, int]:
        found = rt.store.get_case(case_id)
        if found is None:
            return error(404, f"no case {case_id}")
        return jsonify(explain(found, rt.store.timeline(case_id)).to_json()), 200

    @api.post("/api/v1/cases/<int:case_id>/snooze")
    def snooze(case_id: int) -> tuple[Response, int]:
        try:
            body = SnoozeRequest.model_validate(request.get_json(force=True, silent=False))
        except ValidationError as exc:
            return error(422, "invalid snooze request", details=validation_details(exc))
        result = operations.snooze(
            rt, case_id, body.duration, auth.actor(body.by), body.reason, body.model_dump()
        )
        if isinstance(result, Refused):
            return error(HTTP_STATUS[result.why], result.detail)
        return jsonify(result.to_json()), 200

    return api
