"""Each part of the HTTP API on its own (actuator/api/): a blueprint mounted alone on a
bare Flask app, with the one auth object in front, answers as it does in the assembled
app (tests/actuator/test_app.py tests that)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flask import Blueprint, Flask
from flask.testing import FlaskClient

from actuator.api.admin import admin_blueprint
from actuator.api.alerts import alerts_blueprint
from actuator.api.auth import ROLES, Auth
from actuator.api.cases import cases_blueprint
from actuator.api.health import health_blueprint, not_ready
from actuator.runtime import Runtime
from actuator.store.cases import insert_case
from tests.helpers.api import AUTH, alert, body, make_runtime
from tests.helpers.cases import make_case


def alone(rt: Runtime, make: Callable[[Auth], Blueprint]) -> FlaskClient:
    """A bare Flask app with just this blueprint, behind the auth object."""
    app = Flask("one-part")
    auth = Auth(rt)
    app.before_request(auth.guard)
    app.register_blueprint(make(auth))
    return app.test_client()


def test_the_webhook_alone_records_alerts_behind_the_token(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path)
    client = alone(rt, lambda auth: alerts_blueprint(rt, auth))
    refused = client.post("/api/v1/alerts", json=body(alert()))
    assert refused.status_code == 401 and "Bearer" in refused.headers["WWW-Authenticate"]
    wrong = client.post("/api/v1/alerts", json=body(alert()), headers={"Authorization": "Bearer x"})
    assert wrong.status_code == 403
    done = client.post("/api/v1/alerts", json=body(alert()), headers=AUTH)
    assert done.status_code == 200 and done.json["recorded"] == 1
    assert [r["reason"] for r in rt.audit.tail(10) if r["event"] == "auth_failed"] == [
        "missing",
        "invalid",
    ]


def test_the_cases_alone_refuse_an_unknown_filter(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path)
    client = alone(rt, lambda auth: cases_blueprint(rt, auth))
    assert client.get("/api/v1/cases", headers=AUTH).json == {"cases": []}
    unknown = client.get("/api/v1/cases?colour=red", headers=AUTH)
    assert unknown.status_code == 400 and unknown.json["allowed"]


def test_health_alone_is_open_and_says_why_it_is_not_ready(tmp_path: Path) -> None:
    rt = make_runtime(tmp_path)
    client = alone(rt, lambda _: health_blueprint(rt))
    assert client.get("/-/healthy").json == {"healthy": True}
    assert b"gpu_reclaimer_build_info" in client.get("/metrics").data
    ready = client.get("/-/ready")
    assert ready.status_code == (503 if not_ready(rt) else 200)


def test_every_role_names_an_endpoint_that_exists(tmp_path: Path) -> None:
    """The roles are keyed by blueprint.endpoint: a renamed handler would silently fall
    back to `admin`."""
    from actuator.app import create_app

    endpoints = set(create_app(make_runtime(tmp_path)).view_functions)
    assert set(ROLES) <= endpoints


def test_a_repeat_reset_needs_a_reason_and_an_owner_the_actuator_has_seen(
    tmp_path: Path,
) -> None:
    """An empty body, or a user no case ever named (a typo), changes nothing and says so;
    the reset of a known owner is audited with its why."""
    rt = make_runtime(tmp_path)
    client = alone(rt, lambda auth: admin_blueprint(rt, auth))
    url = "/api/v1/owners/{}/repeat-reset"
    empty = client.post(url.format("alice"), headers=AUTH)
    assert empty.status_code == 422 and "reason" in str(empty.json)
    why = {"reason": "talked it through", "by": "sre-ana"}
    unknown = client.post(url.format("alcie"), json=why, headers=AUTH)
    assert unknown.status_code == 404 and "alcie" in unknown.json["error"]
    assert not [r for r in rt.audit.tail(10) if r["event"] == "repeat_reset"]
    with rt.store._tx() as conn:
        insert_case(conn, make_case(id=0, user="alice"), {})
    done = client.post(url.format("alice"), json=why, headers=AUTH)
    assert done.status_code == 200, done.json
    (audited,) = [r for r in rt.audit.tail(10) if r["event"] == "repeat_reset"]
    assert audited["user"] == "alice" and audited["reason"] == "talked it through"
