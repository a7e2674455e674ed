"""The API's error answers: one JSON shape, and no input ever echoed back."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request
from pydantic import ValidationError


def error(code: int, message: str, **extra: Any) -> tuple[Response, int]:
    return jsonify({"error": message, **extra}), code


def unknown_args(allowed: frozenset[str]) -> tuple[Response, int] | None:
    """A query parameter the endpoint does not know is an error, never silently ignored
    (a filter that is dropped would answer with everything)."""
    unknown = sorted(set(request.args) - allowed)
    if not unknown:
        return None
    return error(400, f"unknown query parameter(s) {unknown}", allowed=sorted(allowed))


def validation_details(exc: ValidationError) -> list[dict[str, Any]]:
    # Never echo inputs back: locations and messages only.
    return [
        {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"]}
        for err in exc.errors(include_url=False, include_input=False)[:20]
    ]
