"""The node's checkpoint calls (actuator/checkpoint.py) on the simulated driver, with real
workload processes: a suspend is lock then checkpoint, a failed one leaves the process
running; a resume is restore then unlock, a refused one leaves it checkpointed."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from actuator.checkpoint import CudaCheckpointer, SimCheckpointer, checkpointer_for
from actuator.models import Target
from actuator.node import LocalNode
from actuator.policy import Protect
from exporter import procfs
from exporter.sim.state import load_faults, read_procs, save_faults
from tests.helpers.actuator import Workloads
from tests.support import wait_until


def listed(workloads: Workloads, pid: int) -> bool:
    return any(p.pid == pid for p in read_procs(workloads.node_dir))


def sim_node_and_target(workloads: Workloads, pid: int) -> tuple[LocalNode, Target]:
    """The node's own calls on the simulated node, and the target naming `pid` on GPU 0."""
    node = LocalNode(
        "sim-node",
        Protect(protect_root=False, protected_uid_below=0),
        sim_dir=str(workloads.node_dir),
        sm_window=0.5,
    )
    target = Target(
        "sim-node", pid, procfs.start_ticks(pid) or 0, procfs.boot_id(), workloads.uuid(0)
    )
    return node, target


def test_suspend_and_resume_through_the_simulated_driver(workloads: Workloads) -> None:
    w = workloads.spawn(memory="2GiB")
    driver = checkpointer_for(workloads.node_dir)
    assert isinstance(driver, SimCheckpointer)
    room = driver.host_room()
    assert driver.state(w.pid) == "running"

    done = driver.suspend(w.pid, lock_timeout=5)
    assert (done.ok, done.state) == (True, "checkpointed")
    assert not listed(workloads, w.pid) and w.alive()
    assert driver.host_room() == room - 2 * 1024**3  # the checkpoint is in host memory

    back = driver.resume(w.pid)
    assert (back.ok, back.state) == (True, "running")
    assert listed(workloads, w.pid)
    assert driver.resume(w.pid).ok is False  # not checkpointed: nothing to restore


def test_a_lock_that_times_out_leaves_the_process_running(workloads: Workloads) -> None:
    w = workloads.spawn(memory="1GiB")
    faults = dataclasses.replace(load_faults(workloads.node_dir), checkpoint_lock_hang=True)
    save_faults(workloads.node_dir, faults)
    done = SimCheckpointer(workloads.node_dir).suspend(w.pid, lock_timeout=0.5)
    assert done.ok is False and "CUDA_ERROR_TIMEOUT" in done.detail
    assert done.state == "running" and listed(workloads, w.pid)


def test_a_node_without_the_drivers_calls_has_no_checkpointer(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        CudaCheckpointer(str(tmp_path / "libcuda.so.1"))  # no driver here


def test_the_node_restores_only_onto_a_gpu_seen_with_room(workloads: Workloads) -> None:
    """A restore into a GPU without room fails in the driver, or leaves the process stuck:
    the node reads the GPU first and does not call the driver without the footprint free."""
    w = workloads.spawn(memory="4GiB")
    node, target = sim_node_and_target(workloads, w.pid)
    assert node.suspend(target, 5.0).ok
    filler = workloads.spawn(memory="78GiB", phases="busy")  # 78 of 80 GiB: 2 GiB free
    refused = node.resume(target, need=4 * 1024**3)
    assert refused.ok is False and refused.state == "checkpointed"
    assert re.search(r"no room on GPU 0: [\d.]+ GiB free, 4.0 GiB needed", refused.detail)
    filler.proc.terminate()
    filler.proc.wait(10)
    # The driver frees the filler's memory a moment after it exits: retried until it has.
    back = wait_until(lambda: (r := node.resume(target, need=4 * 1024**3)).ok and r, 15)
    assert back.state == "running" and listed(workloads, w.pid)


def test_a_gpu_the_node_cannot_read_leaves_the_restore_to_the_driver(
    workloads: Workloads,
) -> None:
    """Unread is not "no room": a refusal counts toward the SIGTERM after the last try, so a
    GPU that NVML cannot read now (lost, hung) must not end a suspended process; the driver
    judges the restore, as it would without the pre-check."""
    w = workloads.spawn(memory="4GiB")
    node, target = sim_node_and_target(workloads, w.pid)
    assert node.suspend(target, 5.0).ok
    save_faults(
        workloads.node_dir, dataclasses.replace(load_faults(workloads.node_dir), lost_gpus=(0,))
    )
    assert node.inspector.gpu(workloads.uuid(0))[0] is None  # the node cannot read it
    back = node.resume(target, need=4 * 1024**3)
    assert (back.ok, back.state) == (True, "running") and listed(workloads, w.pid)
