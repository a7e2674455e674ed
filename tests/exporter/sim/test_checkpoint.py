"""The simulated driver's checkpoint (exporter/sim/checkpoint.py), on real workload
processes read through the simulated NVML: a suspended process leaves the GPU's process
list, its memory is freed and its progress stops, its host memory grows by its footprint;
the copy takes longer the larger it is; a restore into a GPU without room fails and leaves
it checkpointed; a lock that hangs, an NCCL rank and a host without memory are refused."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.sim.checkpoint import (
    CheckpointError,
    ProcessState,
    checkpoint,
    free_memory,
    get_state,
    host_memory_used,
    lock,
    restore,
    unlock,
)
from exporter.sim.nvml import SimulatedNvml
from exporter.sim.state import (
    Faults,
    init_node,
    load_node,
    read_procs,
    save_faults,
    save_node,
)
from tests.support import wait_until

GIB = 1 << 30


@pytest.fixture
def node(tmp_path: Path) -> Path:
    directory = tmp_path / "node"
    made = init_node(directory, gpus=2, memory_total=80 * GIB, name="NVIDIA H100")
    # 40 GiB a second: a 2 GiB copy takes 50 ms, a 20 GiB one 500 ms
    save_node(directory, made.__class__(**{**made.__dict__, "copy_bytes_per_second": 40 * GIB}))
    return directory


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def start(
    node: Path, procs: list[subprocess.Popen[bytes]], memory: str, *options: str, gpu: int = 0
) -> int:
    argv = ["--dir", str(node), "--gpu", str(gpu), "--memory", memory, "--tick", "0.05"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter.sim.workload", *argv, "--phases", "busy", *options],
        stdout=subprocess.DEVNULL,
    )
    procs.append(proc)
    wait_until(lambda: any(p.pid == proc.pid for p in read_procs(node)), timeout=10)
    return proc.pid


def listed(node: Path, gpu: int) -> dict[int, int]:
    """What the simulated NVML lists on a GPU now: PID -> bytes."""
    nvml = SimulatedNvml(node)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
    found = {p.pid: p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    nvml.nvmlShutdown()
    return found


def used(node: Path, gpu: int) -> int:
    nvml = SimulatedNvml(node)
    nvml.nvmlInit()
    memory = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(gpu)).used
    nvml.nvmlShutdown()
    return int(memory)


def step(node: Path, pid: int) -> int:
    return next(int(p.extra.get("step", 0)) for p in read_procs(node) if p.pid == pid)


def test_a_suspended_process_frees_its_gpu_stops_and_resumes_where_it_was(
    node: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    pid = start(node, started, "20GiB")
    assert get_state(node, pid) == ProcessState.RUNNING
    wait_until(lambda: step(node, pid) > 3, timeout=10)
    before = used(node, 0)
    lock(node, pid, timeout_s=5)
    assert get_state(node, pid) == ProcessState.LOCKED
    began = time.monotonic()
    done = checkpoint(node, pid)
    copy = time.monotonic() - began
    assert copy >= 0.5  # 20 GiB at 40 GiB/s
    assert done.state == ProcessState.CHECKPOINTED and done.footprint == 20 * GIB
    assert pid not in listed(node, 0)
    assert before - used(node, 0) >= 0.9 * 20 * GIB  # the proof the actuator will ask for
    assert host_memory_used(node) == 20 * GIB
    frozen = step(node, pid) if any(p.pid == pid for p in read_procs(node)) else None
    assert frozen is None  # nothing reported while checkpointed
    time.sleep(0.3)
    assert pid not in listed(node, 0)  # it stays off the GPU: the process does not re-report
    restore(node, pid)
    assert get_state(node, pid) == ProcessState.LOCKED and listed(node, 0)[pid] == 20 * GIB
    assert host_memory_used(node) == 0
    held = step(node, pid)
    time.sleep(0.3)
    assert step(node, pid) == held  # locked: still no progress
    unlock(node, pid)
    wait_until(lambda: step(node, pid) > held, timeout=10)  # it runs again
    assert get_state(node, pid) == ProcessState.RUNNING


def test_the_copy_takes_longer_the_larger_the_footprint(
    node: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    times = {}
    for memory, size in (("2GiB", 2), ("24GiB", 24)):
        pid = start(node, started, memory)
        lock(node, pid, timeout_s=5)
        began = time.monotonic()
        checkpoint(node, pid)
        times[size] = time.monotonic() - began
    assert times[24] > times[2] * 4 and times[24] >= 0.6


def test_a_restore_into_a_full_gpu_fails_and_leaves_it_checkpointed(
    node: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    pid = start(node, started, "30GiB")
    lock(node, pid, timeout_s=5)
    checkpoint(node, pid)
    start(node, started, "60GiB")  # someone took the GPU meanwhile
    assert free_memory(node, 0) < 30 * GIB
    with pytest.raises(CheckpointError) as refused:
        restore(node, pid)
    assert refused.value.code == "CUDA_ERROR_OUT_OF_MEMORY"
    assert get_state(node, pid) == ProcessState.CHECKPOINTED and pid not in listed(node, 0)
    restore(node, pid, gpu=1)  # another GPU of the same chip with room
    assert listed(node, 1)[pid] == 30 * GIB
    unlock(node, pid)
    wait_until(lambda: any(p.pid == pid and p.gpu == 1 for p in read_procs(node)), timeout=10)


def test_a_lock_that_hangs_times_out_and_leaves_it_running(
    node: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    pid = start(node, started, "2GiB")
    save_faults(node, Faults(checkpoint_lock_hang=True))
    began = time.monotonic()
    with pytest.raises(CheckpointError) as refused:
        lock(node, pid, timeout_s=0.5)
    assert refused.value.code == "CUDA_ERROR_TIMEOUT" and time.monotonic() - began >= 0.5
    assert get_state(node, pid) == ProcessState.RUNNING
    held = step(node, pid)
    wait_until(lambda: step(node, pid) > held, timeout=10)  # never stopped


def test_an_nccl_rank_and_a_host_without_room_are_refused(
    node: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    rank = start(node, started, "4GiB", "--rank")
    lock(node, rank, timeout_s=5)
    with pytest.raises(CheckpointError) as refused:
        checkpoint(node, rank)
    assert refused.value.code == "CUDA_ERROR_NOT_SUPPORTED" and rank in listed(node, 0)
    unlock(node, rank)
    small = load_node(node)
    save_node(node, small.__class__(**{**small.__dict__, "host_memory": 8 * GIB}))
    big = start(node, started, "10GiB", gpu=1)
    lock(node, big, timeout_s=5)
    with pytest.raises(CheckpointError) as no_room:
        checkpoint(node, big)
    assert no_room.value.code == "CUDA_ERROR_OUT_OF_MEMORY" and big in listed(node, 1)
    assert get_state(node, big) == ProcessState.LOCKED


def test_calls_out_of_order_are_refused(node: Path, started: list[subprocess.Popen[bytes]]) -> None:
    pid = start(node, started, "2GiB")
    for call in (checkpoint, restore, unlock):
        with pytest.raises(CheckpointError, match="CUDA_ERROR_ILLEGAL_STATE"):
            call(node, pid)
    with pytest.raises(CheckpointError, match="CUDA_ERROR_INVALID_VALUE"):
        get_state(node, 2**22 + 7)


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter.cli", "sim", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sim_suspend_and_resume_say_what_they_did_and_refusals_are_one_line(
    node: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    pid = start(node, started, "4GiB")
    done = sim("suspend", str(node), str(pid))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"process {pid} suspended: 4.0 GiB copied from GPU 0 into host memory; the GPU is released"
    )
    assert (
        f"suspended: pid {pid} (GPU 0, 4.0 GiB in host memory)" in sim("status", str(node)).stdout
    )
    again = sim("suspend", str(node), str(pid))
    assert again.returncode == 2 and again.stderr.count("\n") == 1
    assert "cannot suspend process" in again.stderr and "CUDA_ERROR_ILLEGAL_STATE" in again.stderr
    assert sim("resume", str(node), str(pid), "--gpu", "1").stdout.strip() == (
        f"process {pid} resumed on GPU 1 (4.0 GiB)"
    )
    assert "--checkpoint-lock-hang" in sim("fault", "--help").stdout
    hang = sim("fault", str(node), "--checkpoint-lock-hang", "on")
    assert "the checkpoint lock never returns in time" in hang.stdout
    timed_out = sim("suspend", str(node), str(pid), "--lock-timeout", "0.3s")
    assert timed_out.returncode == 2 and "CUDA_ERROR_TIMEOUT" in timed_out.stderr
    assert get_state(node, pid) == ProcessState.RUNNING
    assert sim("fault", str(node), "--checkpoint-lock-hang", "off").returncode == 0
    fails = sim("fault", str(node), "--checkpoint-restore-fails", "on")
    assert "the driver refuses every restore" in fails.stdout
    assert sim("suspend", str(node), str(pid)).returncode == 0
    refused = sim("resume", str(node), str(pid))
    assert refused.returncode == 2 and "CUDA_ERROR_UNKNOWN" in refused.stderr
    assert get_state(node, pid) == ProcessState.CHECKPOINTED  # never half restored


def test_a_process_that_cannot_say_it_stopped_is_not_locked_and_runs_on(
    node: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """A workload that cannot write its word (another user's, in a folder it may not write;
    here its file is a folder) does not crash: the lock never hears back, times out, and
    the process runs on."""
    pid = start(node, started, "2GiB")
    (node / "checkpoints" / f"{pid}.seen").mkdir(parents=True)
    with pytest.raises(CheckpointError, match="CUDA_ERROR_TIMEOUT"):
        lock(node, pid, timeout_s=0.5)
    held = step(node, pid)
    wait_until(lambda: step(node, pid) > held, timeout=10)
    assert started[-1].poll() is None


@pytest.mark.parametrize(
    ("phases", "held_back"), [("busy=1.5s,done", True), ("idle=1.5s,done", False)]
)
def test_a_suspended_process_does_no_work_but_its_owners_time_runs_on(
    node: Path, started: list[subprocess.Popen[bytes]], phases: str, held_back: bool
) -> None:
    """Work (busy) waits for the restore; an idle phase (its owner away) runs on meanwhile."""
    argv = ["--dir", str(node), "--gpu", "0", "--memory", "1GiB", "--tick", "0.05"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter.sim.workload", *argv, "--phases", phases],
        stdout=subprocess.DEVNULL,
    )
    started.append(proc)
    began = time.monotonic()
    wait_until(lambda: any(p.pid == proc.pid for p in read_procs(node)), timeout=10)
    lock(node, proc.pid, timeout_s=5)
    checkpoint(node, proc.pid)
    time.sleep(2.0)  # suspended for 2 s
    restore(node, proc.pid)
    unlock(node, proc.pid)
    proc.wait(timeout=20)
    took = time.monotonic() - began
    assert proc.returncode == 0
    if held_back:
        assert took >= 3.4  # 1.5 s of work plus the 2 s it could not do any
    else:
        assert took < 3.0  # the owner's 1.5 s ran on while it was suspended


def test_a_dataloader_worker_with_no_work_in_flight_is_locked_at_once_and_suspended(
    node: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """A crashed job's worker still holds its context: with nothing in flight the driver's
    lock returns at once, and the worker stays off the GPU until it is restored."""
    parent = start(node, started, "2GiB", "--children", "1", "--child-memory", "1GiB")
    wait_until(lambda: [p for p in read_procs(node) if p.extra.get("parent") == parent], 10)
    (worker,) = [p.pid for p in read_procs(node) if p.extra.get("parent") == parent]
    began = time.monotonic()
    lock(node, worker, timeout_s=5)
    assert time.monotonic() - began < 2  # not the timeout
    checkpoint(node, worker)
    assert worker not in listed(node, 0) and parent in listed(node, 0)
    time.sleep(0.3)
    assert worker not in listed(node, 0)  # it does not re-report while checkpointed
    restore(node, worker)
    unlock(node, worker)
    wait_until(lambda: listed(node, 0).get(worker) == GIB, timeout=10)
