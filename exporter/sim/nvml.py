"""A simulated NVML that answers like pynvml, backed by a simulated node directory.

Same function names, return shapes, units and ``pynvml.NVMLError`` subclasses as the real
bindings, so code above it cannot tell it from a GPU. Constants, structs and error classes
are pynvml's own (looked up on the real module). Only the calls GPU Reclaimer makes are
implemented; any other ``nvml*`` name raises ``NVMLError_FunctionNotFound`` like an old driver.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml

from exporter.procfs import start_ticks
from exporter.sim import power
from exporter.sim.state import (
    Faults,
    ProcFileCache,
    ProcState,
    SimGpu,
    SimNode,
    load_faults,
    load_node,
)

SNAPSHOT_TTL_SECONDS = 0.2  # like the driver, state is sampled, not read on every call
UTIL_SAMPLE_PERIOD_US = 166_666  # NVML samples per-process utilisation about every 1/6 s


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass(frozen=True)
class SimDeviceHandle:
    """Opaque device handle, like pynvml's c_nvmlDevice_t pointer."""

    index: int


@dataclass(frozen=True)
class _Snapshot:
    node: SimNode
    faults: Faults
    live: tuple[ProcState, ...]
    leaked_bytes: dict[int, int]
    taken: float


class SimulatedNvml:
    """Drop-in for the ``pynvml`` module over a simulated node directory."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._initialised = 0
        self._lock = threading.Lock()
        self._snapshot: _Snapshot | None = None
        self._proc_files = ProcFileCache(self.directory)
        # Energy per GPU index: (joules so far, when, watts then), integrated from opening.
        self._opened = time.monotonic()
        self._energy: dict[int, tuple[float, float, float]] = {}
        self._energy_lock = threading.Lock()

    # Constants, structs and error classes come from the real module.
    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml"):
            raise _error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return getattr(pynvml, name)

    # -- state -------------------------------------------------------------------------
    def _take_snapshot(self) -> _Snapshot:
        now = time.monotonic()
        with self._lock:
            cached = self._snapshot
            if cached is not None and now - cached.taken < SNAPSHOT_TTL_SECONDS:
                return cached
            node = load_node(self.directory)
            faults = load_faults(self.directory)
            live: list[ProcState] = []
            leaked: dict[int, int] = {}
            for state in self._proc_files.read():
                if start_ticks(state.pid) == state.start_ticks:
                    live.append(state)
                elif node.leak_on_exit:
                    leaked[state.gpu] = leaked.get(state.gpu, 0) + state.memory_used
            self._snapshot = _Snapshot(node, faults, tuple(live), leaked, now)
            return self._snapshot

    def _enter(self, call: str) -> _Snapshot:
        """Common prologue of every call: initialised, faults applied."""
        if not self._initialised:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        snapshot = self._take_snapshot()
        if snapshot.faults.nvml_missing:
            raise _error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        if snapshot.faults.hang_call == call:
            self._hang(call, snapshot.faults.hang_seconds)
        return snapshot

    def _hang(self, call: str, seconds: float) -> None:
        # Block like a wedged driver; clearing the fault releases the caller.
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if load_faults(self.directory).hang_call != call:
                return

    def _gpu(self, snapshot: _Snapshot, handle: SimDeviceHandle) -> SimGpu:
        if not isinstance(handle, SimDeviceHandle):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if handle.index in snapshot.faults.lost_gpus:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return snapshot.node.gpus[handle.index]

    @staticmethod
    def _processes_on(snapshot: _Snapshot, gpu: int) -> list[ProcState]:
        return [p for p in snapshot.live if p.gpu == gpu]

    # -- library -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if not (self.directory / "node.json").exists():
            raise _error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        if load_faults(self.directory).nvml_missing:
            raise _error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        with self._lock:
            self._initialised += 1
            self._snapshot = None

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.nvmlInit()

    def nvmlShutdown(self) -> None:
        with self._lock:
            if not self._initialised:
                raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
            self._initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._enter("nvmlSystemGetDriverVersion").node.driver_version

    # -- devices -------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        return len(self._enter("nvmlDeviceGetCount").node.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimDeviceHandle:
        snapshot = self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(snapshot.node.gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return SimDeviceHandle(index)

    def nvmlDeviceGetIndex(self, handle: SimDeviceHandle) -> int:
        return self._gpu(self._enter("nvmlDeviceGetIndex"), handle).index

    def nvmlDeviceGetUUID(self, handle: SimDeviceHandle) -> str:
        return self._gpu(self._enter("nvmlDeviceGetUUID"), handle).uuid

    def nvmlDeviceGetName(self, handle: SimDeviceHandle) -> str:
        return self._gpu(self._enter("nvmlDeviceGetName"), handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: SimDeviceHandle, version: int | None = None) -> Any:
        snapshot = self._enter("nvmlDeviceGetMemoryInfo")
        gpu = self._gpu(snapshot, handle)
        used = gpu.reserved + snapshot.leaked_bytes.get(gpu.index, 0)
        used += sum(p.memory_used for p in self._processes_on(snapshot, gpu.index))
        used += sum(b for g, _, b in snapshot.faults.ghost_pids if g == gpu.index)
        used = min(used, gpu.memory_total)
        memory = pynvml.c_nvmlMemory_t()
        memory.total, memory.used, memory.free = gpu.memory_total, used, gpu.memory_total - used
        return memory

    def nvmlDeviceGetUtilizationRates(self, handle: SimDeviceHandle) -> Any:
        snapshot = self._enter("nvmlDeviceGetUtilizationRates")
        gpu = self._gpu(snapshot, handle)
        processes = self._processes_on(snapshot, gpu.index)
        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu = min(100, sum(p.sm_util for p in processes))
        rates.memory = min(100, sum(p.sm_util // 2 for p in processes))
        return rates

    def nvmlDeviceGetPowerUsage(self, handle: SimDeviceHandle) -> int:
        """Milliwatts now (nvmlDeviceGetPowerUsage): the model's draw at this utilisation."""
        snapshot = self._enter("nvmlDeviceGetPowerUsage")
        gpu = self._gpu(snapshot, handle)
        return round(self._watts(snapshot, gpu) * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: SimDeviceHandle) -> int:
        """Millijoules since this NVML was opened (the driver's counter starts at its load):
        the draw integrated between calls."""
        snapshot = self._enter("nvmlDeviceGetTotalEnergyConsumption")
        gpu = self._gpu(snapshot, handle)
        watts, now = self._watts(snapshot, gpu), time.monotonic()
        with self._energy_lock:
            joules, at, previous = self._energy.get(gpu.index, (0.0, self._opened, watts))
            joules += (previous + watts) / 2 * max(0.0, now - at)  # trapezoid
            self._energy[gpu.index] = (joules, now, watts)
        return round(joules * 1000)

    def _watts(self, snapshot: _Snapshot, gpu: SimGpu) -> float:
        processes = self._processes_on(snapshot, gpu.index)
        util = min(100, sum(p.sm_util for p in processes)) / 100
        return power.model_for(gpu.name).draw(util, holding=bool(processes))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimDeviceHandle) -> list[Any]:
        snapshot = self._enter("nvmlDeviceGetComputeRunningProcesses")
        gpu = self._gpu(snapshot, handle)
        listed = [(p.pid, p.memory_used) for p in self._processes_on(snapshot, gpu.index)]
        listed += [(pid, b) for g, pid, b in snapshot.faults.ghost_pids if g == gpu.index]
        result = []
        for pid, used in listed:
            info = pynvml.nvmlFriendlyObject(
                {
                    "pid": pid,
                    "usedGpuMemory": used,
                    "gpuInstanceId": 0xFFFFFFFF,
                    "computeInstanceId": 0xFFFFFFFF,
                }
            )
            result.append(info)
        return result

    nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: SimDeviceHandle) -> list[Any]:
        self._gpu(self._enter("nvmlDeviceGetGraphicsRunningProcesses"), handle)
        return []

    def nvmlDeviceGetProcessUtilization(self, handle: SimDeviceHandle, timeStamp: int) -> list[Any]:
        """Samples newer than ``timeStamp`` (µs); processes doing no work have no sample.

        Like the driver: NOT_FOUND when there is no sample at all, NOT_SUPPORTED on MIG.
        """
        snapshot = self._enter("nvmlDeviceGetProcessUtilization")
        gpu = self._gpu(snapshot, handle)
        if gpu.index in snapshot.faults.process_util_unsupported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        now_us = int(time.time() * 1_000_000)
        sample_us = now_us - now_us % UTIL_SAMPLE_PERIOD_US
        offset = dict(snapshot.faults.util_pid_offsets).get(gpu.index, 0)
        samples = []
        for process in self._processes_on(snapshot, gpu.index):
            if process.sm_util <= 0 or sample_us <= timeStamp:
                continue
            sample = pynvml.c_nvmlProcessUtilizationSample_t()
            sample.pid, sample.timeStamp = process.pid + offset, sample_us
            sample.smUtil, sample.memUtil = process.sm_util, process.sm_util // 2
            samples.append(sample)
        if not samples:
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return samples
