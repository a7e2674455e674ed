"""The API's error answers (actuator/api/responses.py): one JSON shape, an unknown query
parameter refused rather than dropped, and a validation error that never echoes its input."""

from __future__ import annotations

from flask import Flask
from pydantic import BaseModel, ValidationError

from actuator.api.responses import error, unknown_args, validation_details


class Snooze(BaseModel):
    seconds: int
    reason: str


def test_an_unknown_query_parameter_is_an_error_not_a_dropped_filter() -> None:
    app = Flask(__name__)
    with app.test_request_context("/api/v1/cases?state=notified&usr=alice"):
        refused = unknown_args(frozenset({"state", "user"}))
        assert refused is not None
        response, code = refused
        assert code == 400
        assert response.get_json() == {
            "error": "unknown query parameter(s) ['usr']",
            "allowed": ["state", "user"],
        }
    with app.test_request_context("/api/v1/cases?state=notified"):
        assert unknown_args(frozenset({"state", "user"})) is None


def test_a_validation_error_names_where_and_what_never_the_input() -> None:
    secret = "<script>alert(1)</script>-token-abc123"
    try:
        Snooze.model_validate({"seconds": secret, "extra": 1})
    except ValidationError as exc:
        details = validation_details(exc)
    assert [d["loc"] for d in details] == ["seconds", "reason"]
    assert secret not in repr(details) and "input" not in repr(details)
    app = Flask(__name__)
    with app.app_context():
        response, code = error(422, "invalid snooze", details=details)
    assert code == 422 and response.get_json()["error"] == "invalid snooze"
