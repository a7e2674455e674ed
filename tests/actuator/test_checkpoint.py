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
    the node reads the GPUs first, restores onto its own GPU, else another of the same chip
    with the room, else does not call the driver at all (`no_room`: not a refused try)."""
    gib = 1024**3
    w = workloads.spawn(memory="4GiB")
    node, target = sim_node_and_target(workloads, w.pid)
    assert node.suspend(target, 5.0).ok
    fillers = [workloads.spawn(memory="78GiB", phases="busy", gpu=g) for g in (0, 1)]
    refused = node.resume(target, need=4 * gib)
    assert (refused.ok, refused.no_room, refused.state) == (False, True, "checkpointed")
    assert re.search(
        r"no room on GPU 0: [\d.]+ GiB free, 4.0 GiB needed, nor on the 1 other GPU\(s\) "
        r"of its chip: not restored",
        refused.detail,
    ), refused.detail
    fillers[1].proc.terminate()
    fillers[1].proc.wait(10)
    # The driver frees the filler's memory a moment after it exits: retried until it has.
    back = wait_until(lambda: (r := node.resume(target, need=4 * gib)).ok and r, 15)
    assert back.state == "running" and "onto another" in back.detail and "GPU 1" in back.detail
    moved = next(p for p in read_procs(workloads.node_dir) if p.pid == w.pid)
    assert moved.gpu == 1  # restored onto the other GPU of the same chip, remapped


def test_a_gpu_given_to_a_waiter_is_never_a_restores_place(workloads: Workloads) -> None:
    """GPU 1 is free but was just given to a waiter whose job has not appeared: the restore
    does not take it, and waits for room on its own GPU instead."""
    w = workloads.spawn(memory="4GiB")
    node, target = sim_node_and_target(workloads, w.pid)
    assert node.suspend(target, 5.0).ok
    filler = workloads.spawn(memory="78GiB", phases="busy", gpu=0)
    waiting = node.resume(target, need=4 * 1024**3, avoid=(workloads.uuid(1),))
    assert (waiting.ok, waiting.no_room) == (False, True)
    assert "nor on" not in waiting.detail  # the promised GPU is not a place at all
    filler.proc.terminate()
    filler.proc.wait(10)
    back = wait_until(
        lambda: (r := node.resume(target, need=4 * 1024**3, avoid=(workloads.uuid(1),))).ok and r,
        15,
    )
    assert "its own GPU 0" in back.detail


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


def test_a_restore_onto_another_gpu_is_laid_out_as_the_driver_reads_it() -> None:
    """CUcheckpointRestoreArgs of CUDA 13.1+: the GPU pairs' pointer, their count, zeros to
    64 bytes; each pair two CUuuids of 16 bytes, NVML's "GPU-..." read as hex."""
    import ctypes

    from actuator.checkpoint import Remap, _GpuPair, _RestoreArgs, cu_uuid, restore_args

    assert ctypes.sizeof(_RestoreArgs) == 64 and ctypes.sizeof(_GpuPair) == 32
    assert (_RestoreArgs.gpuPairs.offset, _RestoreArgs.gpuPairsCount.offset) == (0, 8)
    old = "GPU-8a7c2f4e-1b2d-4c3e-9f00-0123456789ab"
    new = "GPU-00112233-4455-6677-8899-aabbccddeeff"
    args, pair = restore_args(Remap(old, new, 1))
    assert args.gpuPairsCount == 1 and bytes(args.reserved) == bytes(52)
    assert bytes(args.gpuPairs.contents.oldUuid.bytes) == bytes.fromhex(
        "8a7c2f4e1b2d4c3e9f000123456789ab"
    )
    assert bytes(pair.newUuid.bytes) == bytes.fromhex("00112233445566778899aabbccddeeff")
    with pytest.raises(ValueError, match="not a GPU UUID"):
        cu_uuid("MIG-4f1c")  # a MIG instance is never suspended, let alone moved
