"""The simulated NVML answers like pynvml, driven by real workload processes."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pynvml
import pytest

from exporter.nvml import open_nvml
from exporter.sim.nvml import SNAPSHOT_TTL_SECONDS
from exporter.sim.state import load_faults, load_node, read_procs, save_faults, save_node
from tests.support import GiB, wait_until


def _nvml(node: Path):
    nvml = open_nvml(node)
    nvml.nvmlInit()
    return nvml


def _listed(nvml, gpu: int) -> dict[int, int]:
    handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
    return {p.pid: p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}


def test_device_calls_have_pynvml_shapes_and_units(sim_node: Path, spawn_workload) -> None:
    busy = spawn_workload(memory="4GiB", phases="busy")
    nvml = _nvml(sim_node)
    assert nvml.nvmlDeviceGetCount() == 2
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetUUID(handle).startswith("GPU-")
    assert nvml.nvmlDeviceGetName(handle) == "NVIDIA H100 80GB HBM3"
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    assert isinstance(memory, pynvml.c_nvmlMemory_t)
    assert memory.total == 80 * GiB
    assert memory.used >= 4 * GiB and memory.free == memory.total - memory.used
    assert 80 <= nvml.nvmlDeviceGetUtilizationRates(handle).gpu <= 100
    assert _listed(nvml, 0) == {busy.pid: 4 * GiB}
    samples = nvml.nvmlDeviceGetProcessUtilization(handle, 0)
    assert [s.pid for s in samples] == [busy.pid]
    assert isinstance(samples[0], pynvml.c_nvmlProcessUtilizationSample_t)
    assert samples[0].timeStamp > 1e15  # microseconds since the epoch


def test_idle_process_has_no_utilization_sample(sim_node: Path, spawn_workload) -> None:
    spawn_workload(phases="idle")
    nvml = _nvml(sim_node)
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetProcessUtilization(nvml.nvmlDeviceGetHandleByIndex(0), 0)


def test_exited_process_frees_its_memory(sim_node: Path, spawn_workload) -> None:
    workload = spawn_workload(memory="8GiB", phases="idle")
    nvml = _nvml(sim_node)
    assert workload.pid in _listed(nvml, 0)
    workload.send_signal(signal.SIGKILL)
    workload.wait()
    time.sleep(SNAPSHOT_TTL_SECONDS)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert _listed(nvml, 0) == {}
    assert nvml.nvmlDeviceGetMemoryInfo(handle).used < 1 * GiB  # only the driver's reserve


def test_leak_mode_keeps_memory_of_exited_process_unlisted(sim_node: Path, spawn_workload) -> None:
    save_node(sim_node, dataclasses.replace(load_node(sim_node), leak_on_exit=True))
    workload = spawn_workload(memory="8GiB", phases="idle")
    workload.send_signal(signal.SIGKILL)
    workload.wait()
    time.sleep(SNAPSHOT_TTL_SECONDS)
    nvml = _nvml(sim_node)
    assert _listed(nvml, 0) == {}
    used = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(0)).used
    assert used >= 8 * GiB


def _set_faults(node: Path, **changes) -> None:
    save_faults(node, dataclasses.replace(load_faults(node), **changes))
    time.sleep(SNAPSHOT_TTL_SECONDS)


def test_nvml_missing(sim_node: Path) -> None:
    _set_faults(sim_node, nvml_missing=True)
    nvml = open_nvml(sim_node)
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        nvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()


def test_one_gpu_lost_while_the_other_works(sim_node: Path, spawn_workload) -> None:
    spawn_workload(gpu=1, phases="busy")
    nvml = _nvml(sim_node)
    _set_faults(sim_node, lost_gpus=(0,))
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(0))
    assert len(_listed(nvml, 1)) == 1


def test_process_utilization_not_supported(sim_node: Path, spawn_workload) -> None:
    spawn_workload(phases="busy")
    nvml = _nvml(sim_node)
    _set_faults(sim_node, process_util_unsupported=(0,))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetProcessUtilization(nvml.nvmlDeviceGetHandleByIndex(0), 0)


def test_ghost_pid_is_listed_without_a_process(sim_node: Path) -> None:
    ghost = 4_000_000  # above pid_max: never a live process
    _set_faults(sim_node, ghost_pids=((0, ghost, GiB),))
    nvml = _nvml(sim_node)
    assert _listed(nvml, 0) == {ghost: GiB}
    assert not psutil.pid_exists(ghost)


def test_hanging_call_blocks_until_the_fault_is_cleared(sim_node: Path) -> None:
    nvml = _nvml(sim_node)
    _set_faults(sim_node, hang_call="nvmlDeviceGetCount", hang_seconds=30)
    answered = threading.Event()
    thread = threading.Thread(target=lambda: (nvml.nvmlDeviceGetCount(), answered.set()))
    thread.start()
    assert not answered.wait(1.0)
    _set_faults(sim_node, hang_call="")
    assert answered.wait(5.0)


def test_uninitialised_and_unknown_calls_fail_like_pynvml(sim_node: Path) -> None:
    nvml = open_nvml(sim_node)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        nvml.nvmlDeviceGetFanSpeed(nvml.nvmlDeviceGetHandleByIndex(0))
    assert nvml.NVML_ERROR_GPU_IS_LOST == pynvml.NVML_ERROR_GPU_IS_LOST


def test_environment_selects_the_simulation(sim_node: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPU_RECLAIMER_SIM_DIR", str(sim_node))
    nvml = open_nvml()
    nvml.nvmlInit()
    assert nvml.nvmlDeviceGetCount() == 2


def test_a_workload_moves_on_when_cued(sim_node: Path, spawn_workload) -> None:
    workload = spawn_workload(phases="idle=cue,busy")

    def phase() -> str:
        (proc,) = [p for p in read_procs(sim_node) if p.pid == workload.pid]
        return str(proc.extra["phase"])

    time.sleep(1.0)  # several ticks: it stays idle without its cue
    assert phase() == "idle"
    os.kill(workload.pid, signal.SIGUSR1)
    wait_until(lambda: phase() == "busy", 10)


def test_a_job_that_is_done_exits_and_frees_its_memory(sim_node: Path, spawn_workload) -> None:
    workload = spawn_workload(phases="busy=1s,done")
    nvml = _nvml(sim_node)
    assert workload.wait(timeout=10) == 0
    assert not _listed(nvml, 0)


def test_loading_memory_grows(sim_node: Path, spawn_workload) -> None:
    workload = spawn_workload(memory="10GiB", phases="load=3s,busy")
    nvml = _nvml(sim_node)
    first = _listed(nvml, 0)[workload.pid]
    later = wait_until(lambda: (_listed(nvml, 0)[workload.pid] > first) and _listed(nvml, 0))
    assert later[workload.pid] <= 10 * GiB


def test_children_hold_memory_and_leave_with_the_parent(sim_node: Path, spawn_workload) -> None:
    parent = spawn_workload("--children", "2", phases="idle")
    nvml = _nvml(sim_node)
    wait_until(lambda: len(_listed(nvml, 0)) == 3)
    children = [c.pid for c in psutil.Process(parent.pid).children()]
    assert len(children) == 2 and set(children) <= set(_listed(nvml, 0))
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=10) == 0
    wait_until(lambda: not _listed(nvml, 0))


def test_orphaned_children_outlive_a_killed_parent(sim_node: Path, spawn_workload) -> None:
    parent = spawn_workload("--children", "1", "--orphan-children", phases="idle")
    nvml = _nvml(sim_node)
    wait_until(lambda: len(_listed(nvml, 0)) == 2)
    child = psutil.Process(parent.pid).children()[0].pid
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    time.sleep(1.0)
    assert set(_listed(nvml, 0)) == {child}
    os.kill(child, signal.SIGKILL)


def test_ignore_sigterm_needs_sigkill(spawn_workload) -> None:
    workload = spawn_workload("--ignore-sigterm", phases="idle")
    workload.send_signal(signal.SIGTERM)
    with pytest.raises(Exception):  # noqa: B017 - TimeoutExpired: still running
        workload.wait(timeout=1.0)
    workload.send_signal(signal.SIGKILL)
    assert workload.wait(timeout=5) == -signal.SIGKILL


def test_named_workloads_look_like_the_real_commands(sim_node: Path, spawn_workload) -> None:
    board = spawn_workload("--name", "tensorboard", phases="idle")
    kernel = spawn_workload("--module", "ipykernel_launcher", phases="idle")
    board_proc, kernel_proc = psutil.Process(board.pid), psutil.Process(kernel.pid)
    assert board_proc.name() == "tensorboard"
    assert Path(board_proc.cmdline()[1]).name == "tensorboard"
    assert kernel_proc.cmdline()[1:3] == ["-m", "ipykernel_launcher"]
