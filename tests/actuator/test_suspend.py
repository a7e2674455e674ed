"""The suspend rung end to end: a real actuator (gunicorn) on a simulated node with real
workload processes and the simulated CUDA checkpoint driver. Notice, then suspend (the GPU
proven free, the process alive), then the owner's keep brings it back; a suspended process
left alone is sent SIGTERM after suspend_max; a restore with no room on its chip waits first
in line and never leaves the process stuck; a lock that hangs falls to SIGTERM as today; the
actuator killed during the checkpoint's copy leaves no case stuck."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from actuator.keep_socket import request_keep
from exporter.sim import checkpoint as sim
from exporter.sim.state import load_faults, load_node, read_procs, save_faults, save_node
from tests.helpers.actuator import Workloads, alert_for, payload
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)
GiB = 1024**3
SUSPEND = {"suspend": True, "suspend_host_reserve": "64MiB"}


def listed(workloads: Workloads, pid: int) -> bool:
    return any(p.pid == pid for p in read_procs(workloads.node_dir))


def signals(case: dict) -> list[str]:
    return [s["signal"] for s in case["signals"]]


def states(case: dict) -> list[str]:
    return [t["state"] for t in case["timeline"]]


def _socket(request: pytest.FixtureRequest) -> Path:
    shared = Path(tempfile.mkdtemp(prefix="keep-socket-"))
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    return shared / "keep.sock"


@pytest.mark.reliability(72)
def test_notice_then_suspend_then_the_owners_keep_resumes_it(
    workloads, actuator_factory, request: pytest.FixtureRequest
) -> None:
    sock = _socket(request)
    actuator = actuator_factory(
        workloads.node_dir, defaults=SUSPEND, server={"keep_socket": str(sock)}
    )
    w = workloads.spawn(memory="3GiB")
    assert actuator.post(payload(alert_for(w))).status_code == 200
    case = actuator.wait_state(w, "suspended", "reclaimed", "failed", "refused", "cancelled")
    assert case["state"] == "suspended", case
    assert states(case) == ["pending", "notified", "suspending", "suspended"]
    assert signals(case) == ["SUSPEND"]  # no signal: the process lives on
    assert w.alive() and not listed(workloads, w.pid)
    assert sim.get_state(workloads.node_dir, w.pid) == sim.ProcessState.CHECKPOINTED
    assert case["freed_bytes"] == 3 * GiB
    calls = actuator.records("checkpoint")
    assert [(c["call"], c["ok"]) for c in calls] == [("SUSPEND", True)]
    told = wait_until(
        lambda: [r for r in actuator.audit("notice") if r.get("kind") == "suspended"], 10
    )
    assert len(told) == 1  # its owner is told it was suspended, and how to resume it

    answer = request_keep(str(sock), w.pid, "keep", 3600, timeout=10)
    assert answer["ok"], answer
    case = actuator.wait_state(w, "snoozed", "reclaimed", "failed", timeout=30)
    assert case["state"] == "snoozed" and case["reason_code"] == "resumed_as_asked", case
    assert states(case)[-3:] == ["suspended", "resuming", "snoozed"]
    assert listed(workloads, w.pid) and w.alive()
    assert sim.get_state(workloads.node_dir, w.pid) == sim.ProcessState.RUNNING
    assert "SIGTERM" not in signals(case)


@pytest.mark.reliability(72)
def test_a_suspended_process_left_alone_is_sent_sigterm_after_suspend_max(
    workloads, actuator_factory
) -> None:
    actuator = actuator_factory(workloads.node_dir, defaults={**SUSPEND, "suspend_max": "2s"})
    w = workloads.spawn(memory="1GiB")
    actuator.post(payload(alert_for(w)))
    suspended = actuator.wait_state(w, "suspended", "reclaimed", "failed", "cancelled")
    assert suspended["state"] == "suspended", suspended
    case = actuator.wait_state(w, "reclaimed", "failed", "cancelled", timeout=30)
    assert case["state"] == "reclaimed", case
    assert signals(case) == ["SUSPEND", "SIGTERM"]
    assert case["reason_code"] == "reclaimed"
    suspended_at = next(t["ts"] for t in case["timeline"] if t["state"] == "suspended")
    terminating = next(t for t in case["timeline"] if t["state"] == "terminating")
    assert terminating["evidence"]["code"] == "suspend_expired"
    assert terminating["ts"] - suspended_at >= 1.5  # suspend_max counts from the suspend
    # Its owner is told before the signal that the suspension ends, and why.
    told = [r for r in actuator.audit("notice") if r.get("kind") != "warning"]
    assert [r["kind"] for r in told] == ["suspended", "restore_stopping"], told
    (sent,) = [r for r in actuator.audit("signals") if "SIGTERM" in json.dumps(r)]
    assert told[-1]["ts"] <= sent["ts"]
    wait_until(lambda: w.exit_code, 10)
    assert w.exit_code == [0]  # the workload's own SIGTERM handler: a clean exit


def _suspended(
    workloads, actuator_factory, request: pytest.FixtureRequest, memory: str, **defaults: str
):  # type: ignore[no-untyped-def]
    """An actuator with the suspend rung and a keep socket, and an idle workload of
    `memory` on GPU 0 it has suspended: (the actuator, the workload, the socket)."""
    sock = _socket(request)
    actuator = actuator_factory(
        workloads.node_dir, defaults={**SUSPEND, **defaults}, server={"keep_socket": str(sock)}
    )
    w = workloads.spawn(memory=memory, gpu=0)
    actuator.post(payload(alert_for(w)))
    assert actuator.wait_state(w, "suspended", "reclaimed", "failed")["state"] == "suspended"
    return actuator, w, sock


@pytest.mark.reliability(73)
def test_a_restore_without_room_waits_first_in_line_and_never_leaves_it_stuck(
    workloads, actuator_factory, request: pytest.FixtureRequest
) -> None:
    """Both GPUs of its chip full: the resume is not tried (the driver never sees a restore
    into a full GPU), the case waits first in line and its owner is told once; the room back
    on its own GPU, it is restored there."""
    actuator, w, sock = _suspended(
        workloads, actuator_factory, request, "4GiB", suspend_restore_retry="2s"
    )
    # Others take both GPUs meanwhile: 78 GiB of 80 on each, so 4 GiB cannot come back.
    fillers = [workloads.spawn(memory="78GiB", phases="busy", gpu=g) for g in (0, 1)]

    assert request_keep(str(sock), w.pid, "keep", 3600, timeout=10)["ok"]
    wait_until(lambda: actuator.case_for(w)["reason_code"] == "restore_waiting", 30)
    case = actuator.case_for(w)
    assert case["state"] == "suspended"  # still suspended, never half restored
    assert sim.get_state(workloads.node_dir, w.pid) == sim.ProcessState.CHECKPOINTED
    assert "no room on GPU 0" in case["reason"] and "first in line" in case["reason"]
    told = wait_until(
        lambda: [r for r in actuator.audit("notice") if r.get("kind") == "restore_waiting"], 10
    )
    assert len(told) == 1 and w.alive()

    fillers[0].proc.terminate()  # room again on its own GPU: the next look restores it there
    wait_until(lambda: not listed(workloads, fillers[0].pid), 15)
    case = actuator.wait_state(w, "snoozed", "reclaimed", "failed", timeout=60)
    assert case["state"] == "snoozed" and listed(workloads, w.pid), case
    back = next(p for p in read_procs(workloads.node_dir) if p.pid == w.pid)
    assert back.gpu == 0  # its own GPU first
    calls = [(c["call"], c["ok"]) for c in actuator.records("checkpoint")]
    assert calls[0] == ("SUSPEND", True) and calls[-1] == ("RESUME", True)
    assert set(calls[1:-1]) == {("RESUME", False)}  # each a look for room, none a refusal
    told = [r for r in actuator.audit("notice") if str(r.get("kind")).startswith("restore")]
    assert [r["kind"] for r in told] == ["restore_waiting"]  # told once, not at every look


def test_a_restore_goes_onto_another_gpu_of_its_chip_where_its_own_is_full(
    workloads, actuator_factory, request: pytest.FixtureRequest
) -> None:
    """Its own GPU taken meanwhile, the other GPU of the same chip free: restored there at
    once (no wait), and the case reads that GPU from then on (its keep proven there)."""
    actuator, w, sock = _suspended(workloads, actuator_factory, request, "4GiB")
    workloads.spawn(memory="78GiB", phases="busy", gpu=0)
    assert request_keep(str(sock), w.pid, "keep", 3600, timeout=10)["ok"]
    case = actuator.wait_state(w, "snoozed", "reclaimed", "failed", "cancelled", timeout=60)
    assert case["state"] == "snoozed", case
    assert "restored onto GPU 1 and running" in case["reason"]
    moved = next(p for p in read_procs(workloads.node_dir) if p.pid == w.pid)
    assert moved.gpu == 1 and w.alive()
    (resumed,) = [c for c in actuator.records("checkpoint") if c["call"] == "RESUME"]
    assert resumed["ok"] and "onto another" in resumed["detail"]


def test_a_restore_the_driver_refuses_is_retried_then_ends_as_sigterm_with_a_notice(
    workloads, actuator_factory, request: pytest.FixtureRequest
) -> None:
    """Room on its GPU, but the driver refuses every restore: each try is counted and told,
    and after the fifth the case goes on to SIGTERM, its owner told before the signal; the
    process is never left checkpointed and silent."""
    actuator, w, sock = _suspended(
        workloads, actuator_factory, request, "2GiB", suspend_restore_retry="1s"
    )
    faults = dataclasses.replace(load_faults(workloads.node_dir), checkpoint_restore_fails=True)
    save_faults(workloads.node_dir, faults)
    assert request_keep(str(sock), w.pid, "keep", 3600, timeout=10)["ok"]
    case = actuator.wait_state(w, "reclaimed", "failed", "cancelled", "snoozed", timeout=60)
    assert case["state"] == "reclaimed" and signals(case)[-1] == "SIGTERM", case
    terminating = next(t for t in case["timeline"] if t["state"] == "terminating")
    assert terminating["evidence"]["code"] == "restore_failed"
    assert "refused the restore 5 times" in terminating["reason"]
    resumes = [c for c in actuator.records("checkpoint") if c["call"] == "RESUME"]
    assert len(resumes) == 5 and not any(c["ok"] for c in resumes)
    assert all("CUDA_ERROR_UNKNOWN" in c["detail"] for c in resumes)
    told = [r["kind"] for r in actuator.audit("notice") if str(r.get("kind")).startswith("rest")]
    assert told == ["restore_refused"] * 4 + ["restore_stopping"], told
    wait_until(lambda: w.exit_code, 10)


def test_a_lock_that_hangs_falls_to_sigterm_as_today(workloads, actuator_factory) -> None:
    save_faults(
        workloads.node_dir,
        dataclasses.replace(load_faults(workloads.node_dir), checkpoint_lock_hang=True),
    )
    actuator = actuator_factory(
        workloads.node_dir, defaults={**SUSPEND, "suspend_lock_timeout": "1s"}
    )
    w = workloads.spawn(memory="1GiB")
    actuator.post(payload(alert_for(w)))
    case = actuator.wait_state(w, "reclaimed", "failed", "cancelled", "refused", timeout=30)
    assert case["state"] == "reclaimed", case
    assert signals(case) == ["SIGTERM"]  # the suspend call failed: nothing was suspended
    assert states(case) == ["pending", "notified", "suspending", "terminating", "reclaimed"]
    terminating = next(t for t in case["timeline"] if t["state"] == "terminating")
    assert terminating["evidence"]["code"] == "not_suspended"
    assert [c["ok"] for c in actuator.records("checkpoint")] == [False]


def test_an_ineligible_process_gets_sigterm_with_the_reason(workloads, actuator_factory) -> None:
    # Host memory for checkpoints: 2 GiB, a 3 GiB footprint needs 3.3 GiB.
    node = load_node(workloads.node_dir)
    save_node(workloads.node_dir, dataclasses.replace(node, host_memory=2 * GiB))
    actuator = actuator_factory(workloads.node_dir, defaults=SUSPEND)
    w = workloads.spawn(memory="3GiB")
    actuator.post(payload(alert_for(w)))
    case = actuator.wait_state(w, "reclaimed", "failed", "cancelled", "refused")
    assert case["state"] == "reclaimed", case
    assert states(case) == ["pending", "notified", "terminating", "reclaimed"]
    terminating = next(t for t in case["timeline"] if t["state"] == "terminating")
    assert "not suspended: host memory" in terminating["reason"]


def test_a_process_on_a_gpu_an_mps_server_serves_is_not_suspended_and_the_server_is_protected(
    workloads, actuator_factory, tmp_path: Path
) -> None:
    """The driver cannot checkpoint MPS clients: where an MPS server (a real process whose
    executable is nvidia-cuda-mps-server) holds a context on the GPU, the ladder goes to
    SIGTERM as today, saying why; the server itself, idle as it looks, is never signalled."""
    import subprocess

    server_exe = tmp_path / "nvidia-cuda-mps-server"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", server_exe)
    server = subprocess.Popen([str(server_exe), "300"])
    try:
        faults = load_faults(workloads.node_dir)
        save_faults(
            workloads.node_dir,
            dataclasses.replace(faults, ghost_pids=((0, server.pid, 512 * 1024**2),)),
        )
        actuator = actuator_factory(workloads.node_dir, defaults=SUSPEND)
        w = workloads.spawn(memory="2GiB", gpu=0)
        from exporter import procfs

        ticks = procfs.start_ticks(server.pid) or 0
        began = procfs.boot_time() + ticks / os.sysconf("SC_CLK_TCK")
        mps = dataclasses.replace(w, proc=server, start_time=began, start_ticks=ticks)
        actuator.post(payload(alert_for(w), alert_for(mps, command="nvidia-cuda-mps-server")))
        case = actuator.wait_state(w, "reclaimed", "failed", "cancelled", "refused")
        assert case["state"] == "reclaimed", case
        terminating = next(t for t in case["timeline"] if t["state"] == "terminating")
        assert "not suspended: an MPS server runs on its GPU" in terminating["reason"]
        assert actuator.audit("checkpoint") == []  # the driver was never called
        assert server.poll() is None  # the server: protected, never signalled
        held = actuator.case_for(mps)
        assert held is not None and held["state"] == "refused", held
        assert "protected" in held["reason"], held
    finally:
        server.kill()
        server.wait()


def test_the_actuator_killed_during_the_checkpoints_copy_leaves_no_case_stuck(
    workloads, actuator_factory
) -> None:
    node = load_node(workloads.node_dir)
    save_node(workloads.node_dir, dataclasses.replace(node, copy_bytes_per_second=GiB))
    policy = {"defaults": {**SUSPEND, "suspend_timeout": "4s"}, "reconciler": {"lease_ttl": "1s"}}
    actuator = actuator_factory(workloads.node_dir, **policy)
    w = workloads.spawn(memory="6GiB")  # a 6 s copy
    actuator.post(payload(alert_for(w)))
    actuator.wait_state(w, "suspending", "suspended", "reclaimed", "failed")
    time.sleep(1.0)  # the copy is under way
    actuator.kill()
    assert sim.get_state(workloads.node_dir, w.pid) == sim.ProcessState.LOCKED  # mid-copy
    actuator.start()  # the same store: the case goes on from `suspending`
    case = actuator.wait_state(w, "reclaimed", "failed", "suspended", timeout=40)
    assert case["state"] == "reclaimed", case
    assert signals(case).count("SUSPEND") <= 1 and "SIGTERM" in signals(case)
    assert not w.alive() or wait_until(lambda: w.exit_code, 10)
