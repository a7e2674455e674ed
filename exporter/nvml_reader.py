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


@dataclass(frozen=True)
class NvmlReading:
    up: bool
    driver_version: str = ""
    gpus: tuple[GpuReading, ...] = ()
    failed_gpus: tuple[int, ...] = ()
    error: str = ""


class NvmlReader:
    """Initialises NVML once (retrying while it is missing) and reads every GPU."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
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
        supported, samples = self._process_utilization(index, handle)
        processes = []
        seen: set[int] = set()
        for info in listed:
            if info.pid in seen:  # MIG lists a PID once per instance; one series per GPU
                continue
            seen.add(info.pid)
            if supported:
                util: float | None = samples.get(info.pid, 0) / 100
            else:
                util = None
            processes.append(GpuProcessReading(info.pid, info.usedGpuMemory, util))
        return GpuReading(
            index=index,
            uuid=uuid,
            name=name,
            memory_total=memory.total if memory is not None else None,
            memory_used=memory.used if memory is not None else None,
            utilization=rates.gpu / 100 if rates is not None else None,
            process_util_supported=supported,
            processes=tuple(processes),
        )

    def _process_utilization(self, index: int, handle: Any) -> tuple[bool | None, dict[int, int]]:
        """(supported, latest SM % per PID since the previous scrape, at least 1 s back).

        NOT_FOUND means supported with no sample: processes did no work. NOT_SUPPORTED
        (MIG, old GPUs) or any other error means unknown.
        """
        now_us = int(time.time() * 1_000_000)
        previous = self._last_util_read_us.get(index, now_us - FIRST_UTIL_WINDOW_US)
        since = min(previous, now_us - MIN_UTIL_WINDOW_US)
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(handle, since)
        except pynvml.NVMLError_NotFound:
            self._last_util_read_us[index] = now_us
            return True, {}
        except pynvml.NVMLError as error:
            self._warn_once("nvmlDeviceGetProcessUtilization", error)
            return None, {}
        self._last_util_read_us[index] = now_us
        latest: dict[int, tuple[int, int]] = {}
        for sample in samples:
            if sample.pid not in latest or sample.timeStamp > latest[sample.pid][0]:
                latest[sample.pid] = (sample.timeStamp, sample.smUtil)
        return True, {pid: min(util, 100) for pid, (_, util) in latest.items()}
