"""One NVML reading per scrape, with errors handled per field, per GPU and per process.

A lost GPU or a vanished PID never fails the whole reading; an unknown value is ``None``
(exported as an absent series), never 0.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.procfs import PID_MAX_LIMIT
from exporter.thresholds import SHIPPED

log = logging.getLogger(__name__)

FIRST_UTIL_WINDOW_US = 20_000_000  # first scrape: samples from the last 20 s
# Look back at least this far: NVML samples every ~1/6 s, and a scrape that came sooner
# than the next sample must not read "no sample" as idle.
MIN_UTIL_WINDOW_US = 1_000_000


@dataclass(frozen=True)
class GpuProcessReading:
    pid: int
    memory_used: int | None
    sm_utilization: float | None  # 0..1; None = unknown (never read as idle)


@dataclass(frozen=True)
class GpuReading:
    index: int
    uuid: str
    name: str
    memory_total: int | None
    memory_used: int | None
    utilization: float | None
    process_util_supported: bool | None
    processes: tuple[GpuProcessReading, ...]
    # Why per-process utilisation is unknown on this GPU ("" when it is known): see util_join.
    util_unknown_reason: str = ""
    power_watts: float | None = None  # board power now; None: not supported or failed
    energy_joules: float | None = None  # since the driver loaded (Volta and later)


@dataclass(frozen=True)
class NvmlReading:
    up: bool
    driver_version: str = ""
    gpus: tuple[GpuReading, ...] = ()
    failed_gpus: tuple[int, ...] = ()
    error: str = ""


def valid_pid(pid: object) -> bool:
    """A PID a binding may honestly report (not 0, not 2**32-1, not a swapped field)."""
    return isinstance(pid, int) and 0 < pid < PID_MAX_LIMIT


def util_join(listed: set[int], samples: dict[int, int], device_util: float | None) -> str:
    """'' when "a listed process with no sample did 0 %" is proven on this GPU, else why not.

    Proven only when every sample names a listed process (no other PID namespace, no vGPU
    layer renaming PIDs) and the device's own utilisation agrees: a busy device whose
    listed processes show no work means the samples describe someone else.
    """
    if not samples.keys() <= listed:
        return "pid_mismatch"
    if device_util is None:
        return "device_util_unknown"
    busiest = max((samples.get(pid, 0) for pid in listed), default=0) / 100
    if device_util > SHIPPED.max_sm_util and busiest <= SHIPPED.max_sm_util:
        return "device_busy_unattributed"
    return ""


class NvmlReader:
    """Initialises NVML once (retrying while it is missing) and reads every GPU.

    ``min_window_us``: per-process utilisation is the highest sample of at least this long
    ago (the exporter: since the previous scrape, at least 1 s; the actuator: its sm_window).
    """

    def __init__(self, nvml: Any, *, min_window_us: int = MIN_UTIL_WINDOW_US) -> None:
        self.nvml = nvml
        self.min_window_us = min_window_us
        self._initialised = False
        self._driver_version = ""
        self._last_util_read_us: dict[int, int] = {}
        self._warned: set[tuple[str, int]] = set()

    def _ensure_initialised(self) -> None:
        if not self._initialised:
            self.nvml.nvmlInit()
            self._initialised = True
            self._driver_version = self.nvml.nvmlSystemGetDriverVersion()

    def _warn_once(self, call: str, error: pynvml.NVMLError) -> None:
        key = (call, getattr(error, "value", -1))
        if key not in self._warned:
            self._warned.add(key)
            log.warning("NVML %s failed: %s (reported once)", call, error)

    def _query(self, call: str, *args: Any) -> Any:
        """A field that may fail on its own: None on NVML error."""
        try:
            return getattr(self.nvml, call)(*args)
        except pynvml.NVMLError as error:
            self._warn_once(call, error)
            return None

    def read(self) -> NvmlReading:
        try:
            self._ensure_initialised()
            count = self.nvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as error:
            return NvmlReading(up=False, error=str(error))
        gpus, failed = [], []
        for index in range(count):
            try:
                gpus.append(self._read_gpu(index))
            except pynvml.NVMLError as error:
                self._warn_once(f"device {index}", error)
                failed.append(index)
        return NvmlReading(
            up=True,
            driver_version=self._driver_version,
            gpus=tuple(gpus),
            failed_gpus=tuple(failed),
        )

    def _read_gpu(self, index: int) -> GpuReading:
        nvml = self.nvml
        # Identity and the process list are essential: their failure marks the GPU failed.
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        listed = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        name = self._query("nvmlDeviceGetName", handle) or ""
        memory = self._query("nvmlDeviceGetMemoryInfo", handle)
        rates = self._query("nvmlDeviceGetUtilizationRates", handle)
        device_util = rates.gpu / 100 if rates is not None else None
        supported, samples = self._process_utilization(index, handle)
        unique: dict[int, Any] = {}
        invalid = False
        for info in listed:
            if not valid_pid(info.pid):
                invalid = True  # a binding bug or a foreign namespace: never a target
                continue
            unique.setdefault(info.pid, info)  # MIG lists a PID once per instance
        reason = "" if supported else ("not_supported" if supported is False else "error")
        if not reason:
            reason = "invalid_pid" if invalid else util_join(set(unique), samples, device_util)
        if reason:
            self._warn_reason_once(index, reason)
        processes = []
        for pid, info in unique.items():
            util: float | None = None if reason else samples.get(pid, 0) / 100
            processes.append(GpuProcessReading(pid, info.usedGpuMemory, util))
        milliwatts = self._query("nvmlDeviceGetPowerUsage", handle)
        millijoules = self._query("nvmlDeviceGetTotalEnergyConsumption", handle)
        return GpuReading(
            power_watts=milliwatts / 1000 if milliwatts is not None else None,
            energy_joules=millijoules / 1000 if millijoules is not None else None,
            index=index,
            uuid=uuid,
            name=name,
            memory_total=memory.total if memory is not None else None,
            memory_used=memory.used if memory is not None else None,
            utilization=device_util,
            process_util_supported=not reason,
            processes=tuple(processes),
            util_unknown_reason=reason,
        )

    def _warn_reason_once(self, index: int, reason: str) -> None:
        key = (f"util_join:{reason}", index)
        if key not in self._warned:
            self._warned.add(key)
            log.warning(
                "GPU %d: per-process utilisation is unknown (%s); its processes are never "
                "judged idle by utilisation (reported once)",
                index,
                reason,
            )

    def _process_utilization(self, index: int, handle: Any) -> tuple[bool | None, dict[int, int]]:
        """(supported, highest SM % per sample PID since the previous read, at least
        ``min_window_us`` back).

        NOT_FOUND means supported with no sample: processes did no work. NOT_SUPPORTED
        (MIG, old GPUs) gives False, any other error None: both mean unknown.
        """
        now_us = int(time.time() * 1_000_000)
        previous = self._last_util_read_us.get(index, now_us - FIRST_UTIL_WINDOW_US)
        since = min(previous, now_us - self.min_window_us)
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(handle, since)
        except pynvml.NVMLError_NotFound:
            self._last_util_read_us[index] = now_us
            return True, {}
        except pynvml.NVMLError_NotSupported as error:
            self._warn_once("nvmlDeviceGetProcessUtilization", error)
            return False, {}
        except pynvml.NVMLError as error:
            self._warn_once("nvmlDeviceGetProcessUtilization", error)
            return None, {}
        self._last_util_read_us[index] = now_us
        highest: dict[int, int] = {}
        for sample in samples:
            if sample.timeStamp > since:
                pid = int(sample.pid)
                highest[pid] = max(highest.get(pid, 0), min(int(sample.smUtil), 100))
        return True, highest
