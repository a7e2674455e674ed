"""The Flask app (actuator/app.py) in-process, through its test client: the webhook and the API,
status codes, auth, fuzzing."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actuator.app import create_app
from actuator.compose import build_reconciler
from actuator.models import Case, State, Target
from actuator.node import LiveState
from actuator.notifications.notify import NullNotifier
from actuator.runtime import Runtime
from actuator.store.cases import insert_case
from tests.helpers.api import AUTH, alert, body, make_runtime
from tests.helpers.cases import make_case


class LoudNode:
    """A node fake that fails the test on any real signal."""

    name = "n1"

    def inspect_many(self, targets: Sequence[Target]) -> list[LiveState]:
        return [self.inspect(target) for target in targets]

    def inspect(self, target: Target) -> LiveState:
        return LiveState(sampled_at=time.time(), exists=False)

    def alive(self, members):  # pragma: no cover - never reached without a signal
        raise AssertionError("alive() without a signal")

    def gpu_processes(self, uuid: str):
        return None

    def monitored_count(self):
        return 10

    def job_processes(self, job):  # type: ignore[no-untyped-def]
        return []

    def signal_tree(self, target, members, sig, *, dry_run, key=None):
        if not dry_run:
            raise AssertionError(f"signal {sig} sent to {target}")
        return []

    def rehearse_many(self, rehearsals):  # type: ignore[no-untyped-def]
        return [[] for _ in rehearsals]

    def wait_exit(self, timeout: float) -> None:
        pass


@pytest.fixture
def rt(tmp_path: Path) -> Runtime:
    return make_runtime(tmp_path, server={"max_body": "64KiB"})


@pytest.fixture
def client(rt: Runtime):
    return create_app(rt).test_client()


def test_accepts_and_records(client, rt):
    r = client.post("/api/v1/alerts", json=body(alert()), headers=AUTH)
    assert r.status_code == 200 and r.json["recorded"] == 1
    assert len(rt.store.pending_episodes()) == 1


@pytest.mark.reliability(6)
def test_auth(client):
    assert client.post("/api/v1/alerts", json=body(alert())).status_code == 401
    bad = {"Authorization": "Bearer nope"}
    assert client.post("/api/v1/alerts", json=body(alert()), headers=bad).status_code == 403
    assert client.get("/api/v1/cases", headers={"Authorization": "Basic x"}).status_code == 401
    assert client.get("/metrics").status_code == 200
    assert client.get("/-/healthy").status_code == 200


@pytest.mark.reliability(7)
def test_bad_input_codes_change_nothing(client, rt):
    post = client.post
    assert post(
        "/api/v1/alerts", data="x", headers=AUTH, content_type="text/plain"
    ).status_code == (415)
    r = post("/api/v1/alerts", data="{not json", headers=AUTH, content_type="application/json")
    assert r.status_code == 400 and "JSON" in r.json["error"]
    r = post("/api/v1/alerts", json=body(alert(), version="3"), headers=AUTH)
    assert r.status_code == 422 and r.json["details"][0]["loc"] == "version"
    r = post("/api/v1/alerts", json=body(alert(), alerts="many"), headers=AUTH)
    assert r.status_code == 422
    dup = '{"version":"4","status":"resolved","status":"firing","alerts":[]}'
    r = post("/api/v1/alerts", data=dup, headers=AUTH, content_type="application/json")
    assert r.status_code == 400 and "duplicate key 'status'" in r.json["error"]
    huge = body(*[alert(fingerprint=f"f{i}") for i in range(2000)])
    assert post("/api/v1/alerts", json=huge, headers=AUTH).status_code == 413
    assert rt.store.pending_episodes() == []
    snap = rt.store.metric_snapshot()["requests"]
    assert snap == {"415": 1, "400": 2, "422": 2, "413": 1}


@pytest.mark.reliability(7)
@pytest.mark.parametrize(
    "bad",
    [
        {"startsAt": "0001-01-01T00:00:00+01:00"},
        {"startsAt": "9999-12-31T23:59:59-01:00"},
        {"endsAt": "9999-12-31T23:59:59-01:00"},
        {"startsAt": "yesterday"},
        {"labels": {"pid": 4242}},
        {"fingerprint": ""},
    ],
)
def test_a_bad_alert_never_costs_the_good_ones_of_its_payload(client, rt, bad):
    good = alert(fingerprint="good")
    r = client.post(
        "/api/v1/alerts", json=body(alert(**{"fingerprint": "bad", **bad}), good), headers=AUTH
    )
    assert r.status_code == 200, r.json
    assert (r.json["recorded"], r.json["rejected"]) == (1, 1)
    assert [e.fingerprint for e in rt.store.pending_episodes()] == ["good"]
    assert rt.store.metric_snapshot()["alerts_rejected"] == 1
    assert any(rec["event"] == "alert_rejected" for rec in rt.audit.tail(10))


def test_resolved_is_sticky_and_duplicates_are_idempotent(client, rt):
    client.post("/api/v1/alerts", json=body(alert(status="resolved")), headers=AUTH)
    for _ in range(3):
        client.post("/api/v1/alerts", json=body(alert()), headers=AUTH)
    (ep,) = rt.store.pending_episodes()
    assert ep.status == "resolved"


def test_cases_api_and_snooze_errors(client):
    assert client.get("/api/v1/cases?state=bogus", headers=AUTH).status_code == 400
    assert client.get("/api/v1/cases?limit=0", headers=AUTH).status_code == 400
    assert client.get("/api/v1/cases/99", headers=AUTH).status_code == 404
    r = client.post("/api/v1/cases/99/snooze", json={"duration": "1h"}, headers=AUTH)
    assert r.status_code == 404
    r = client.post("/api/v1/cases/99/snooze", json={"duration": "forever"}, headers=AUTH)
    assert r.status_code == 422
    assert client.get("/api/v1/audit?limit=x", headers=AUTH).status_code == 400


def test_cases_filter_by_pid_and_refuse_unknown_parameters(client, rt):
    for pid in (4242, 4343):
        case = make_case(
            id=0, state=State.NOTIFIED, pid=pid, start_ticks=pid, fingerprint=f"f{pid}"
        )
        with rt.store._tx() as conn:
            insert_case(conn, case, {})
    r = client.get("/api/v1/cases?pid=4343", headers=AUTH)
    assert r.status_code == 200 and [c["target"]["pid"] for c in r.json["cases"]] == [4343]
    for bad in ("\uff14\uff13\uff14\uff13", "-1", "x", "99999999999"):  # full-width too
        assert client.get(f"/api/v1/cases?pid={bad}", headers=AUTH).status_code == 400
    r = client.get("/api/v1/cases?pids=4343", headers=AUTH)  # a typo must not list everything
    assert r.status_code == 400 and "pids" in r.json["error"] and "pid" in r.json["allowed"]
    assert client.get("/api/v1/audit?cases=1", headers=AUTH).status_code == 400


def test_ready_reports_unwritable_audit(tmp_path):
    (tmp_path / "dir").mkdir()
    rt = make_runtime(
        tmp_path, storage={"database": str(tmp_path / "db"), "audit_log": str(tmp_path / "dir")}
    )
    r = create_app(rt).test_client().get("/-/ready")
    assert r.status_code == 503 and "audit log" in r.json["reasons"][0]


@pytest.mark.reliability(55)
def test_an_api_error_path_answers_a_reason_never_500(tmp_path):
    """The audit log made unreadable (a directory): every GET path answers 4xx with a
    reason, or 503 while the dependency is away; none answers 500."""
    (tmp_path / "dir").mkdir()
    rt = make_runtime(
        tmp_path, storage={"database": str(tmp_path / "db"), "audit_log": str(tmp_path / "dir")}
    )
    app = create_app(rt)
    client = app.test_client()
    r = client.get("/api/v1/audit", headers=AUTH)
    assert r.status_code == 503 and "audit log" in r.json["error"], r.json
    paths = {
        rule.rule.replace("<int:case_id>", "1").replace("<token>", "x")
        for rule in app.url_map.iter_rules()
        if "GET" in rule.methods
    }
    for path in sorted(p for p in paths if "<" not in p):
        answer = client.get(path, headers=AUTH)
        assert answer.status_code != 500, (path, answer.data[:300])


text = st.text(max_size=20)
labels = st.dictionaries(
    st.sampled_from(["alertname", "reclaim", "node", "pid", "uuid", "uid", "start_time", "x"]),
    st.one_of(text, st.sampled_from(["true", "n1", "4242", "GPU-0", "-1", "1e400", "nan"])),
)
alert_strategy = st.fixed_dictionaries(
    {
        "status": st.sampled_from(["firing", "resolved", "pending", ""]),
        "labels": labels,
        "annotations": labels,
        "startsAt": st.one_of(
            st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
            text,
            st.integers(),
        ),
        "endsAt": st.sampled_from(["0001-01-01T00:00:00Z", "2020-01-01T00:00:00Z", None]),
        "fingerprint": st.one_of(text, st.integers()),
    }
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(text, c, max_size=4),
    max_leaves=20,
)
payloads = st.one_of(
    json_values,
    st.builds(
        lambda alerts, version, truncated: body(
            *alerts, version=version, truncatedAlerts=truncated
        ),
        st.lists(alert_strategy, max_size=5),
        st.sampled_from(["4", 4, "3"]),
        st.one_of(st.integers(), st.none()),
    ),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=payloads)
@pytest.mark.reliability(7, 8)
def test_webhook_never_5xx_and_never_signals(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("fuzz")
    rt = make_runtime(tmp)
    client = create_app(rt).test_client()
    raw = json.dumps(data, allow_nan=True)
    r = client.post("/api/v1/alerts", data=raw, headers=AUTH, content_type="application/json")
    assert r.status_code < 500, r.json
    assert r.status_code in (200, 400, 422)
    reconciler = build_reconciler(rt.config, rt.store, rt.audit, {"n1": LoudNode()}, NullNotifier())
    assert reconciler.tick()
    assert reconciler.tick()
    assert rt.store.metric_snapshot()["signals"] == {}


def test_snooze_survives_a_reconciler_tick_between_read_and_write(client, rt):
    """The reconciler saves samples on every tick, which moves the row's version; a snooze
    landing between its read and its write must still succeed, not answer 409."""
    case = make_case(id=0, state=State.NOTIFIED)
    with rt.store._tx() as conn:
        insert_case(conn, case, {})
    real_get = rt.store.get_case
    ticks = {"left": 3}

    def get_then_tick(case_id: int) -> Case | None:
        found = real_get(case_id)
        if ticks["left"] > 0 and found is not None:
            ticks["left"] -= 1
            other = real_get(case_id)
            assert other is not None
            other.cpu_seconds = 1.0
            assert rt.store.save_samples(other)  # a tick lands after our read
        return found

    rt.store.get_case = get_then_tick  # type: ignore[method-assign]
    r = client.post(
        f"/api/v1/cases/{case.id}/snooze", json={"duration": "1h", "by": "alice"}, headers=AUTH
    )
    assert r.status_code == 200, r.json
    assert r.json["state"] == "snoozed"
    assert ticks["left"] == 0  # the conflicts really happened
    assert real_get(case.id).state == State.SNOOZED
    snoozes = [rec for rec in rt.audit.tail(10) if rec["event"] == "snooze"]
    assert len(snoozes) == 1  # retries do not repeat the audit record


def test_the_records_say_who_really_acted(client, rt, tmp_path):
    """Without operators the shared token is the principal: what a caller writes in `by` is
    kept as what they said, never as who acted; refused logins and duplicate deliveries are
    on the record."""
    case = make_case(id=0, state=State.NOTIFIED)
    with rt.store._tx() as conn:
        insert_case(conn, case, {})
    r = client.post(
        f"/api/v1/cases/{case.id}/snooze", json={"duration": "1h", "by": "the-ceo"}, headers=AUTH
    )
    assert r.status_code == 200, r.json
    (snooze,) = [rec for rec in rt.audit.tail(20) if rec["event"] == "snooze"]
    assert snooze["by"] == "token (the shared bearer token), said 'the-ceo'", snooze
    reset = client.post(
        "/api/v1/breaker/reset", json={"by": "root", "reason": "test"}, headers=AUTH
    )
    assert reset.status_code == 200, reset.json
    (record,) = [rec for rec in rt.audit.tail(20) if rec["event"] == "breaker_reset"]
    assert record["by"].startswith("token (the shared bearer token)"), record

    # A wrong or missing shared token is audited (never the token itself).
    assert client.get("/api/v1/cases", headers={"Authorization": "Bearer guess"}).status_code == 403
    assert client.post("/api/v1/alerts", json=body(alert())).status_code == 401
    failed = [rec for rec in rt.audit.tail(50) if rec["event"] == "auth_failed"]
    assert [(f["reason"], f["path"]) for f in failed] == [
        ("invalid", "/api/v1/cases"),
        ("missing", "/api/v1/alerts"),
    ]
    assert "guess" not in json.dumps(failed)

    # The same payload twice: the second delivery is recorded as a duplicate.
    payload = body(alert(fingerprint="dup-1"))
    for _ in range(2):
        assert client.post("/api/v1/alerts", json=payload, headers=AUTH).status_code == 200
    (dup,) = [rec for rec in rt.audit.tail(50) if rec["event"] == "alert_duplicate"]
    assert dup["fingerprint"] == "dup-1" and dup["deliveries"] == 2
