"""`gpu-reclaimer why CASE` and GET /api/v1/cases/<id>/why (actuator/why.py, why_cli.py):
each decision with the evidence the node showed, against a real actuator."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from actuator.models import State
from actuator.why import Explanation, explain
from exporter.sim.state import init_node
from tests.helpers.actuator import TOKEN, Actuator, Workloads, alert_for, payload
from tests.helpers.cases import make_case
from tests.support import gpu_reclaimer


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workloads, Actuator, Path]]:
    """One simulated node of 4 GPUs and one real actuator for this module's cases; the
    token as a file, as an SRE keeps it."""
    base = tmp_path_factory.mktemp("why")
    init_node(base / "node", gpus=4, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    workloads = Workloads(base / "node")
    actuator = Actuator(base / "actuator", base / "node", {}).start()
    token = base / "token"
    token.write_text(TOKEN + "\n")
    yield workloads, actuator, token
    actuator.stop()
    workloads.cleanup()


def why(actuator_url: str, case: int, *options: str) -> subprocess.CompletedProcess[str]:
    return gpu_reclaimer("why", str(case), "--actuator", actuator_url, *options)


def test_why_shows_each_decision_with_the_evidence_it_was_judged_on(
    node: tuple[Workloads, Actuator, Path],
) -> None:
    workloads, actuator, token = node
    idle = workloads.spawn(memory="3GiB")
    busy = workloads.spawn(gpu=1, phases="busy", memory="5GiB")
    actuator.post(payload(alert_for(idle), alert_for(busy)))
    reclaimed = actuator.wait_state(idle, "reclaimed", "failed", "refused", "cancelled")
    cancelled = actuator.wait_state(busy, "cancelled", "refused", "reclaimed", "failed")
    assert reclaimed["state"] == "reclaimed" and cancelled["state"] == "cancelled"

    done = why(actuator.url, reclaimed["id"], "--token-file", str(token))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith(f"case {reclaimed['id']}: ") and f"PID {idle.pid}" in text
    for state in ("pending", "notified", "terminating", "reclaimed"):
        assert f"  {state}: " in text, text
    assert "SM utilisation 0% (idle at most 5%)" in text
    assert "GPU memory held 3.0 GiB" in text
    assert "process tree CPU 0.0" in text  # measured between two re-checks

    explained = actuator.get(f"/api/v1/cases/{cancelled['id']}/why")
    last = explained["steps"][-1]
    assert last["state"] == "cancelled"
    util = next(e for e in last["evidence"] if e.startswith("SM utilisation"))
    assert util.endswith("(idle at most 5%)") and not util.startswith("SM utilisation 0%")
    assert "GPU memory held 5.0 GiB" in last["evidence"]


def test_why_answers_mistakes_in_one_line(
    node: tuple[Workloads, Actuator, Path], tmp_path: Path
) -> None:
    _, actuator, token = node
    missing = why(actuator.url, 999, "--token-file", str(token))
    assert (missing.returncode, missing.stdout) == (2, "")
    assert "no case 999" in missing.stderr and "Traceback" not in missing.stderr
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token")
    refused = why(actuator.url, 1, "--token-file", str(wrong))
    assert refused.returncode == 2 and "refused the request (403)" in refused.stderr


def test_cpu_is_measured_between_re_checks_and_a_vanished_process_says_so() -> None:
    case = make_case(
        id=7, state=State.CANCELLED, node="n1", uuid="GPU-1", reason="process exited", user="alice"
    )
    live = {"exists": True, "sm_util": 0.0, "gpu_memory_bytes": 2 * 1024**3, "log_mtime": 40.0}
    thresholds = {"max_sm_util": 0.05, "max_cpu_cores": 0.1, "log_quiet_for": 300.0}
    timeline = [
        {
            "ts": 100.0,
            "state": "pending",
            "reason": "idle confirmed",
            "evidence": {"live": {**live, "cpu_seconds": 10.0}, "thresholds": thresholds},
        },
        {
            "ts": 110.0,
            "state": "notified",
            "reason": "owner warned",
            "evidence": {"live": {**live, "cpu_seconds": 15.0}, "thresholds": thresholds},
        },
        {
            "ts": 130.0,
            "state": "cancelled",
            "reason": "process exited",
            "evidence": {"live": {"exists": False}},
        },
    ]
    explained = explain(case, timeline)
    first, second, gone = explained.steps
    assert not any("CPU" in fact for fact in first.evidence)  # nothing to measure against yet
    assert "process tree CPU 0.50 cores since the re-check before (idle at most 0.10 cores)" in (
        second.evidence
    )
    assert "log written 1m10s before (quiet needed: 5m)" in second.evidence
    assert gone.evidence == ("the process no longer existed",)
    assert Explanation.from_json(explained.to_json()) == explained
    assert explained.headline.startswith("case 7: process (PID 4242, alice) on n1 GPU-1")


def test_hostile_text_reaches_the_terminal_as_one_plain_line() -> None:
    case = make_case(
        id=8,
        node="n1",
        uuid="GPU-1",
        facts={"program": "train\x1b[2J\u202eyb-tpek\nroot's job", "user": "mallory"},
    )
    timeline = [
        {
            "ts": 100.0,
            "state": "pending",
            "reason": "idle\x1b]0;owned\x07",
            "evidence": {"live": {"exists": True, "errors": ["cmdline: \x1b[31mred"]}},
        }
    ]
    text = explain(case, timeline).render()
    assert not any(c in text for c in "\x1b\x07\u202e"), repr(text)
    assert text.splitlines()[0].startswith("case 8: train")
    # The headline, the step, util, log, heartbeat and the error: one line each.
    assert len(text.splitlines()) == 6


def test_an_owner_asks_for_runtime_in_the_environment_and_why_says_what_came_of_it(
    node: tuple[Workloads, Actuator, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPU_RECLAIMER_KEEP, read by the actuator from /proc/<pid>/environ: within the rule's
    bounds (default 0s to 24h) the process is kept, beyond them it is refused and reclaimed
    like any other; both are in the case's evidence."""
    workloads, actuator, _ = node
    monkeypatch.setenv("GPU_RECLAIMER_KEEP", "1h")
    kept = workloads.spawn(gpu=2, memory="3GiB")
    monkeypatch.setenv("GPU_RECLAIMER_KEEP", "48h")
    greedy = workloads.spawn(gpu=3, memory="3GiB")
    monkeypatch.delenv("GPU_RECLAIMER_KEEP")
    actuator.post(payload(alert_for(kept), alert_for(greedy)))
    snoozed = actuator.wait_state(kept, "snoozed", "reclaimed", "refused", "cancelled")
    reclaimed = actuator.wait_state(greedy, "reclaimed", "failed", "refused", "cancelled")
    assert kept.proc.poll() is None  # kept: never signalled
    assert snoozed["state"] == "snoozed" and snoozed["reason_code"] == "kept_as_asked"
    assert reclaimed["state"] == "reclaimed"
    kept_why = actuator.get(f"/api/v1/cases/{snoozed['id']}/why")
    assert (
        "its owner asked: GPU_RECLAIMER_KEEP=1h granted (0s to 24h)"
        in (kept_why["steps"][-1]["evidence"])
    )
    greedy_why = actuator.get(f"/api/v1/cases/{reclaimed['id']}/why")
    notes = {e for step in greedy_why["steps"] for e in step["evidence"]}
    assert "its owner asked: GPU_RECLAIMER_KEEP=48h refused: rule defaults allows 0s to 24h" in (
        notes
    )


def test_why_says_what_the_re_check_read_of_the_network() -> None:
    case = make_case(id=8, state=State.CANCELLED, node="n1", uuid="GPU-1", user="alice")
    thresholds = {"log_quiet_for": 300.0}
    base = {"exists": True, "sm_util": 0.0, "gpu_memory_bytes": 1024**3}
    timeline = [
        {
            "ts": 100.0,
            "state": "pending",
            "reason": "quiet",
            "evidence": {
                "live": {**base, "listening_external": 1, "listen_ports": [8000]},
                "thresholds": thresholds,
            },
        },
        {
            "ts": 200.0,
            "state": "cancelled",
            "reason": "data moved",
            "evidence": {
                "live": {
                    **base,
                    "listening_external": 0,
                    "listen_ports": [40001, 40002],
                    "network_activity": 190.0,
                },
                "thresholds": thresholds,
            },
        },
        {
            "ts": 210.0,
            "state": "refused",
            "reason": "unknown",
            "evidence": {"live": {**base, "network_unknown": "pid 9 is gone"}},
        },
    ]
    service, kernel, unknown = explain(case, timeline).steps
    assert "listens where other hosts reach it (ports [8000])" in service.evidence
    assert "no client seen" in service.evidence
    assert "listens on loopback only (ports [40001, 40002]): no service" in kernel.evidence
    assert "data beyond keep-alive moved on its connections 10s before" in kernel.evidence
    assert "its network unknown (pid 9 is gone)" in unknown.evidence


def test_the_headline_says_the_state_and_leaves_the_reason_to_its_step() -> None:
    """Issue 60: a long reason was cut with '…' in the headline and repeated whole below."""
    reason = "process tree exited; 10.0 GiB freed on GPU-" + "0" * 200
    case = make_case(state=State.RECLAIMED, reason=reason)
    timeline = [{"ts": 100.0, "state": "reclaimed", "reason": reason, "evidence": {}}]
    said = explain(case, timeline).render()
    assert said.count("freed on") == 1 and "…" not in said.splitlines()[0]
    assert said.splitlines()[0].endswith(": now reclaimed")
