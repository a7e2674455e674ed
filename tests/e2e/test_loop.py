"""The whole loop, end to end: simulated node -> exporter -> Prometheus (the shipped rules,
x1/15) -> Alertmanager (the shipped routes) -> actuator (enforce) -> signals -> memory freed.

All workloads start together on one stack (`harness.SCENARIOS`); the fault scenarios run at
the same time on a second, small stack. Each test waits for its own outcome.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from exporter.sim.state import read_procs
from tests.e2e.harness import (
    GRACE,
    SCENARIOS,
    TERM_TIMEOUT,
    FaultRun,
    MainLoop,
    cases_for,
    diagnose,
    fault_run,
    main_loop,
    read_audit,
    signalled_in_audit,
    wait_case,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def faults(system_tools: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultRun]:
    with fault_run(tmp_path_factory.mktemp("e2e-faults")) as run:
        yield run


@pytest.fixture(scope="module")
def loop(
    system_tools: None, faults: FaultRun, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MainLoop]:
    with main_loop(tmp_path_factory.mktemp("e2e")) as running:
        yield running


def _metric(url: str, name: str) -> float:
    text = requests.get(url + "/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not in {url}/metrics")


def _states(case: dict) -> list[str]:
    return [step["state"] for step in case["timeline"]]


def test_idle_training_is_notified_then_reclaimed(loop: MainLoop) -> None:
    stack, w = loop.stack, loop.workloads["idle_training"]
    case = wait_case(stack, w, {"reclaimed"})
    assert case["alertname"] == "GpuProcessIdle"
    assert _states(case)[-3:] == ["notified", "terminating", "reclaimed"], _states(case)
    assert case["term_at"] - case["notified_at"] >= GRACE - 0.5  # the owner had the grace
    assert [s["signal"] for s in case["signals"]] == ["SIGTERM"]
    assert case["freed_bytes"] == 6 * 2**30

    # The owner got the notice, and the memory is gone from the simulated GPU and the exporter.
    # (the demo's owner is on a WeCom-format robot: markdown naming the PID and the case)
    def mine() -> list[str]:
        notices = [
            str((r.body or {}).get("markdown", {}).get("content", ""))
            for r in stack.sink.posts("/notice")
        ]
        return [n for n in notices if f"PID {w.pid}" in n and f"工单号 {case['id']}" in n]

    assert any("是否仍在进行" in n for n in mine()), mine()  # the warning
    # The follow-up is carried out after the reclaim is committed (the case reads "reclaimed"
    # a moment before it is posted: once 40 ms before, and this read fell in between).
    stack.wait_for(
        lambda: any("已被回收" in n for n in mine()), timeout=10, what="the follow-up notice"
    )
    assert not w.alive()
    assert w.pid not in {p.pid for p in read_procs(stack.node_dir)}
    stack.wait_for(
        lambda: not stack.query(f'gpu_process_memory_used_bytes{{pid="{w.pid}"}}'),
        timeout=10,
        what="the exporter to stop listing the process",
    )

    # The audit log holds every decision, with the live evidence, and the signal sent.
    records = [r for r in read_audit(stack) if r.get("case") == case["id"]]
    moves = [r["to"] for r in records if r.get("event") == "decision"]
    assert moves[-3:] == ["notified", "terminating", "reclaimed"], moves
    notified = next(r for r in records if r.get("to") == "notified")
    assert notified["live"]["on_gpu"] is True and notified["live"]["sm_util"] == 0
    assert signalled_in_audit(stack, w.pid) == ["decision sigterm", f"SIGTERM->{w.pid}"]

    # The actuator's metrics, directly and as Prometheus scraped them.
    actuator = stack.url("actuator")
    assert _metric(actuator, "gpu_released_success_total") >= 1
    assert _metric(actuator, "gpu_memory_freed_bytes_total") >= 6 * 2**30
    assert _metric(actuator, "gpu_idle_detected_total") >= 1
    stack.wait_for(
        lambda: stack.query("gpu_memory_freed_bytes_total >= 6 * 2^30"),
        timeout=10,
        what="Prometheus to scrape the actuator's gpu_memory_freed_bytes_total",
    )


def test_idle_notebook_kernel_is_reclaimed(loop: MainLoop) -> None:
    w = loop.workloads["notebook_kernel"]
    case = wait_case(loop.stack, w, {"reclaimed"})
    assert case["alertname"] == "GpuProcessIdle"
    assert "notified" in _states(case)
    assert not w.alive()


@pytest.mark.reliability(24)
def test_hung_job_with_stale_heartbeat_is_reclaimed_as_stalled(loop: MainLoop) -> None:
    w = loop.workloads["hung_nccl"]
    case = wait_case(loop.stack, w, {"reclaimed"})
    # Util reads 100 %: only the stale heartbeat gives it away.
    assert case["alertname"] == "GpuProcessStalled"
    assert case["labels"]["class"] == "stalled"
    assert not w.alive()


def test_job_ignoring_sigterm_is_killed_after_term_timeout(loop: MainLoop) -> None:
    w = loop.workloads["ignores_sigterm"]
    case = wait_case(loop.stack, w, {"reclaimed"})
    assert [s["signal"] for s in case["signals"]] == ["SIGTERM", "SIGKILL"]
    assert case["kill_at"] - case["term_at"] >= TERM_TIMEOUT - 0.1
    assert _states(case)[-3:] == ["terminating", "killing", "reclaimed"]
    assert not w.alive()


def test_job_resuming_within_the_grace_is_left_alone(loop: MainLoop) -> None:
    stack, w = loop.stack, loop.workloads["resumes_in_grace"]
    case = wait_case(stack, w, {"cancelled"})
    assert "notified" in _states(case), _states(case)  # it was warned ...
    assert case["notified_at"] <= loop.cued["resumes_in_grace"]  # ... then worked again ...
    assert case["signals"] == [] and case["term_at"] is None  # ... and never signalled
    assert signalled_in_audit(stack, w.pid) == []
    assert w.alive()
    (proc,) = [p for p in read_procs(stack.node_dir) if p.pid == w.pid]
    assert proc.extra["phase"] == "busy"


@pytest.fixture(scope="module")
def settled(loop: MainLoop) -> MainLoop:
    """After every reclaim and cancel happened: the untouched ones have been watched through
    at least one whole detection + grace cycle of their neighbours. A neighbour that misses
    its outcome fails its own test, not these."""
    for key, (_, expected) in SCENARIOS.items():
        if expected in ("reclaimed", "killed", "stalled", "cancelled"):
            states = {"cancelled"} if expected == "cancelled" else {"reclaimed"}
            with contextlib.suppress(AssertionError):
                wait_case(loop.stack, loop.workloads[key], states)
    return loop


@pytest.mark.parametrize(
    "key", [k for k, (_, expected) in SCENARIOS.items() if expected in ("untouched", "protected")]
)
def test_working_and_protected_processes_are_untouched(settled: MainLoop, key: str) -> None:
    stack, w = settled.stack, settled.workloads[key]
    expected = SCENARIOS[key][1]
    context = diagnose(stack, w)
    assert w.alive(), context
    assert signalled_in_audit(stack, w.pid) == [], context
    cases = cases_for(stack, w.pid)
    if expected == "protected":
        # The rules flag it (it is idle); the actuator refuses: a protected command.
        assert any(c["state"] == "refused" and c["reason_code"] == "protected" for c in cases), (
            context
        )
        assert all(c["signals"] == [] and c["term_at"] is None for c in cases), context
    else:
        # Working (busy, loading, CPU-bound): the rules never even went pending for it.
        assert cases == [], context
        ever = stack.query(f'count_over_time(ALERTS{{pid="{w.pid}"}}[10m])')
        assert ever == [], ever
        # ... while the exporter did see it, so the silence is a verdict, not blindness.
        assert stack.query(f'gpu_process_memory_used_bytes{{pid="{w.pid}"}}'), context


def _first_firing(run: FaultRun, alert: str, since: float, until: float) -> float | None:
    """When `alert` (for the fault workload, for process alerts) first fired in the TSDB."""
    assert run.workload is not None
    selector = f'alertname="{alert}",alertstate="firing"'
    if alert.startswith("GpuProcess"):
        selector += f',pid="{run.workload.pid}"'
    data = run.stack.prometheus_api(
        "/api/v1/query_range", query=f"ALERTS{{{selector}}}", start=since, end=until, step=1
    )
    times = [float(t) for series in data["result"] for t, _ in series["values"]]
    return min(times) if times else None


@pytest.mark.reliability(17, 22)
def test_nothing_is_signalled_while_nvml_fails_or_the_exporter_is_down(faults: FaultRun) -> None:
    # Runs last: by now the fault timeline (started with the main stack) is nearly over.
    assert faults.done.wait(timeout=200), "the fault timeline did not finish"
    stack = faults.stack
    assert faults.error is None, f"{faults.error!r}\n{diagnose(stack, faults.workload)}"
    w, marks, seen = faults.workload, faults.marks, faults.seen
    assert w is not None
    # The faults took effect: the health alerts fired (to chat; never to the actuator).
    nvml_down = _first_firing(faults, "GpuNvmlDown", marks["nvml_missing"], marks["nvml_back"])
    assert nvml_down is not None, diagnose(stack, w)
    down = _first_firing(
        faults, "GpuExporterDown", marks["exporter_killed"], marks["exporter_back"]
    )
    assert down is not None, diagnose(stack, w)
    # The idle process was pending before each fault; nothing fired or was signalled during
    # them, nor before the windows refilled after the exporter came back.
    assert seen["pending_before_nvml"] and seen["pending_before_kill"], seen
    for step in ("end_of_nvml_fault", "end_of_exporter_down"):
        assert seen[step]["alive"], seen
        assert seen[step]["case"] is None, seen[step]
    first = _first_firing(faults, "GpuProcessIdle", w.started, time.time())
    assert first is not None and first >= marks["exporter_back"] + 20 - 1, (first, marks)
    # Healthy again, the same process is reclaimed: the silence was the health gate's doing.
    final = seen["final"]
    assert final and final["state"] == "reclaimed", diagnose(stack, w)
    assert final["created"] > marks["exporter_back"]
    assert not w.alive()


def test_run_directories_keep_every_log(loop: MainLoop, faults: FaultRun) -> None:
    for stack in (loop.stack, faults.stack):
        logs = {p.name for p in Path(stack.logs_dir).iterdir()}
        assert {"exporter.log", "actuator.log", "prometheus.log", "alertmanager.log"} <= logs
