"""End to end: real workloads, real signals, real HTTP to a real gunicorn actuator."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from exporter.sim.state import init_node
from tests.helpers.actuator import Actuator, Workloads, alert_for, payload
from tests.support import wait_until

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def enforce(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workloads, Actuator]]:
    base = tmp_path_factory.mktemp("enforce")
    init_node(base / "node", gpus=2, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    workloads = Workloads(base / "node")
    policy = {
        "projects": [
            {"name": "slow", "match": {"labels": ["slow"]}, "grace": "30s"},
        ]
    }
    actuator = Actuator(base / "actuator", base / "node", policy).start()
    yield workloads, actuator
    actuator.stop()
    workloads.cleanup()


def signals(case: dict) -> list[tuple[int, str]]:
    return [(s["pid"], s["signal"]) for s in case["signals"]]


@pytest.mark.reliability(28)
def test_process_ignoring_sigterm_is_killed_after_term_timeout(enforce):
    workloads, actuator = enforce
    w = workloads.spawn("--ignore-sigterm", memory="3GiB")
    assert actuator.post(payload(alert_for(w))).status_code == 200
    case = actuator.wait_state(w, "reclaimed", "failed", "refused", "cancelled")
    assert case["state"] == "reclaimed", case
    assert signals(case) == [(w.pid, "SIGTERM"), (w.pid, "SIGKILL")]
    assert 1.9 <= case["kill_at"] - case["term_at"] <= 3.5  # term_timeout is 2 s here
    wait_until(lambda: w.exit_code, 5)
    assert w.exit_code == [-9]
    assert case["freed_bytes"] == 3 * 1024**3
    states = [t["state"] for t in case["timeline"]]
    assert states == ["pending", "notified", "terminating", "killing", "reclaimed"]


@pytest.mark.reliability(29)
def test_process_exiting_on_sigterm_gets_no_sigkill(enforce):
    workloads, actuator = enforce
    w = workloads.spawn()
    actuator.post(payload(alert_for(w)))
    case = actuator.wait_state(w, "reclaimed", "failed", "refused", "cancelled")
    assert case["state"] == "reclaimed", case
    assert signals(case) == [(w.pid, "SIGTERM")]
    assert case["kill_at"] is None


@pytest.mark.reliability(33)
def test_children_holding_memory_are_terminated_first(enforce):
    workloads, actuator = enforce
    w = workloads.spawn("--children", "2", "--child-memory", "1GiB", memory="2GiB")
    actuator.post(payload(alert_for(w)))
    case = actuator.wait_state(w, "reclaimed", "failed", "refused", "cancelled")
    assert case["state"] == "reclaimed", case
    sent = signals(case)
    assert len(sent) == 3 and {s for _, s in sent} == {"SIGTERM"}
    assert sent[-1] == (w.pid, "SIGTERM")  # children first, the root last
    assert len(case["members"]) == 3
    assert case["freed_bytes"] == 4 * 1024**3


@pytest.mark.reliability(5, 25, 26)
def test_pid_reuse_is_refused_and_untouched(enforce):
    workloads, actuator = enforce
    w = workloads.spawn()
    # The alert describes an older process that had this PID.
    actuator.post(payload(alert_for(w, start_ticks=max(1, w.start_ticks - 1))))
    case = actuator.wait_state(w, "refused", "reclaimed", "cancelled")
    assert case["state"] == "refused"
    assert case["reason_code"] == "identity_mismatch"
    assert case["signals"] == []
    assert w.alive()


@pytest.mark.reliability(14, 23)
def test_activity_between_notice_and_sigterm_cancels(enforce):
    workloads, actuator = enforce
    # Idle until the notice is out (however long the confirmation takes under load), then
    # busy again (its cue) inside the project's 30 s grace.
    w = workloads.spawn(phases="idle=cue,busy")
    actuator.post(payload(alert_for(w, project="slow")))
    actuator.wait_state(w, "notified")
    os.kill(w.pid, signal.SIGUSR1)
    case = actuator.wait_state(w, "cancelled", "terminating", "reclaimed")
    assert case["state"] == "cancelled", case
    assert case["reason_code"] == "activity"
    assert case["rule"].endswith("(slow)")
    assert case["signals"] == []
    assert w.alive()


@pytest.mark.reliability(34)
def test_protected_command_is_refused_but_jupyter_kernel_is_not(enforce):
    workloads, actuator = enforce
    board = workloads.spawn("--name", "tensorboard")
    kernel = workloads.spawn("--module", "ipykernel_launcher")
    actuator.post(payload(alert_for(board), alert_for(kernel)))
    case = actuator.wait_state(board, "refused", "reclaimed", "cancelled")
    assert case["state"] == "refused" and case["reason_code"] == "protected", case
    assert "tensorboard" in case["reason"]
    assert board.alive() and case["signals"] == []
    kcase = actuator.wait_state(kernel, "reclaimed", "refused", "cancelled", "failed")
    assert kcase["state"] == "reclaimed", kcase


@pytest.mark.reliability(1, 2, 3, 4)
def test_duplicates_ha_copies_and_resolved_before_firing(enforce):
    workloads, actuator = enforce
    dup = workloads.spawn(phases="idle")
    firing = alert_for(dup, fingerprint="dup-episode")
    body = payload(firing)
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(actuator.post(body).status_code))
        for _ in range(4)
    ]  # the same payload at two workers, HA copies, retries
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 4
    actuator.wait_state(dup, "reclaimed")
    assert len([c for c in actuator.cases(limit=1000) if c["target"]["pid"] == dup.pid]) == 1
    # replayed hours later: the episode is known, nothing new happens
    assert actuator.post(body).status_code == 200

    late = workloads.spawn()
    resolved = alert_for(late, fingerprint="late-episode", status="resolved")
    resolved["endsAt"] = resolved["startsAt"]
    actuator.post(payload(resolved))
    fired = dict(resolved, status="firing", endsAt="0001-01-01T00:00:00Z")
    actuator.post(payload(fired))
    time.sleep(1.0)
    assert actuator.case_for(late) is None
    assert late.alive()


@pytest.mark.reliability(12)
def test_other_alerts_in_the_group_are_ignored(enforce):
    workloads, actuator = enforce
    w = workloads.spawn()
    other = alert_for(w, alertname="GpuMemoryOrphaned")
    del other["labels"]["reclaim"]
    r = actuator.post(payload(other, truncated=3))
    assert r.status_code == 200 and r.json()["ignored"] == 1 and r.json()["recorded"] == 0
    time.sleep(0.5)
    assert actuator.case_for(w) is None


@pytest.mark.reliability(37)
def test_observe_mode_signals_nothing(workloads: Workloads, actuator_factory):
    actuator = actuator_factory(workloads.node_dir, mode="observe")
    w = workloads.spawn("--ignore-sigterm")
    actuator.post(payload(alert_for(w)))
    case = actuator.wait_state(w, "observed", "refused", "cancelled", "reclaimed")
    assert case["state"] == "observed", case
    assert "would" in case["reason"]
    assert case["signals"] == [] and w.alive()
    assert actuator.metric("gpu_reclaimer_signals_sent_total", signal="SIGTERM") == 0


@pytest.mark.reliability(35)
def test_restart_mid_escalation_does_not_signal_twice(workloads: Workloads, actuator_factory):
    actuator = actuator_factory(
        workloads.node_dir, defaults={"term_timeout": "4s"}, reconciler={"lease_ttl": "1s"}
    )
    w = workloads.spawn("--ignore-sigterm")
    actuator.post(payload(alert_for(w)))
    actuator.wait_state(w, "terminating")
    # The state is committed before its SIGTERM is sent: a crash in between loses that
    # SIGTERM (by design; SIGKILL follows). This test crashes after it was sent.
    wait_until(lambda: signals(actuator.case_for(w) or {"signals": []}), 10)
    actuator.kill()  # crash in the middle of the escalation
    assert w.alive()
    actuator.start()
    case = actuator.wait_state(w, "reclaimed", "failed", timeout=25)
    assert case["state"] == "reclaimed"
    assert signals(case) == [(w.pid, "SIGTERM"), (w.pid, "SIGKILL")]


@pytest.mark.reliability(40)
def test_unwritable_audit_log_signals_nothing(workloads: Workloads, actuator_factory, tmp_path):
    blocked = tmp_path / "audit-is-a-directory"
    blocked.mkdir()
    actuator = actuator_factory(workloads.node_dir, storage={"audit_log": str(blocked)})
    ready = actuator.session.get(actuator.url + "/-/ready", timeout=5)
    assert ready.status_code == 503
    assert "audit" in " ".join(ready.json()["reasons"])
    w = workloads.spawn()
    assert actuator.post(payload(alert_for(w))).status_code == 200  # recorded in SQLite
    time.sleep(2.0)
    case = actuator.case_for(w)
    assert case is None or case["signals"] == []
    assert w.alive()


@pytest.mark.reliability(38)
def test_termination_limit_defers_the_second(workloads: Workloads, actuator_factory):
    actuator = actuator_factory(workloads.node_dir, limits={"terminations_per_minute": 1})
    first, second = workloads.spawn(), workloads.spawn()
    actuator.post(payload(alert_for(first), alert_for(second)))
    a = actuator.wait_state(first, "reclaimed", "deferred", "refused", "cancelled")
    b = actuator.wait_state(second, "reclaimed", "deferred", "refused", "cancelled")
    outcomes = sorted([(a["state"], a["reason_code"]), (b["state"], b["reason_code"])])
    assert outcomes == [("deferred", "limit_minute"), ("reclaimed", "reclaimed")]
    assert actuator.metric("gpu_reclaimer_cases", state="deferred") == 1
    held = second if b["state"] == "deferred" else first
    assert held.alive()


@pytest.mark.reliability(38)
def test_circuit_breaker_opens_and_resets(workloads: Workloads, actuator_factory):
    actuator = actuator_factory(
        workloads.node_dir,
        breaker={"min_flagged": 2, "max_share": 0.5, "window": "10m"},
    )
    procs = [workloads.spawn() for _ in range(3)]
    actuator.post(payload(alert_for(procs[0]), alert_for(procs[1])))
    for w in procs[:2]:
        case = actuator.wait_state(w, "deferred", "refused", "reclaimed", "terminating")
        assert case["state"] == "deferred" and case["reason_code"] == "circuit_breaker_open"
    assert all(w.alive() for w in procs)
    assert actuator.metric("gpu_reclaimer_circuit_breaker_open") == 1
    events = [r["event"] for r in actuator.get("/api/v1/audit")["records"]]
    assert "breaker_open" in events
    r = actuator.session.post(
        actuator.url + "/api/v1/breaker/reset", json={"by": "sre", "reason": "checked"}, timeout=5
    )
    assert r.status_code == 200 and r.json()["was_open"] is True
    assert actuator.metric("gpu_reclaimer_circuit_breaker_open") == 0
    # The reset revisits the deferred cases: they resume and are reclaimed.
    for w in procs[:2]:
        case = actuator.wait_state(w, "reclaimed", "refused", "failed")
        assert case["state"] == "reclaimed", case
        assert [t["state"] for t in case["timeline"]][:3] == ["pending", "deferred", "pending"]
    assert procs[2].alive()


def test_snooze_through_the_api(workloads: Workloads, actuator_factory):
    actuator = actuator_factory(workloads.node_dir, defaults={"grace": "30s"})
    w = workloads.spawn()
    actuator.post(payload(alert_for(w)))
    case = actuator.wait_state(w, "notified")
    r = actuator.session.post(
        actuator.url + f"/api/v1/cases/{case['id']}/snooze",
        json={"duration": "1h", "by": "alice", "reason": "debugging"},
        timeout=5,
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "snoozed"
    time.sleep(0.5)
    assert actuator.case_for(w)["state"] == "snoozed"
    assert actuator.cases(state="snoozed")[0]["id"] == case["id"]
    assert w.alive()


def test_metrics_agree_across_workers(enforce):
    _, actuator = enforce
    values = {actuator.metric("gpu_reclaimer_webhook_requests_total", code="200") for _ in range(6)}
    assert len(values) == 1 and next(iter(values)) >= 1
