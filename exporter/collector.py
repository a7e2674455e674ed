"""The Prometheus collector: fresh metric families at every scrape, nothing kept per PID.

A process that exited is simply not yielded. Identity lives on ``gpu_process_info`` only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter import procfs
from exporter.guard import BoundedCall
from exporter.heartbeat_reader import ProcessRef, read_heartbeats
from exporter.identity import IdentityCache
from exporter.logactivity import log_write_timestamp
from exporter.nvml_reader import GpuReading, NvmlReader, NvmlReading

log = logging.getLogger(__name__)

GPU_LABELS = ["gpu", "uuid"]
PROCESS_LABELS = ["gpu", "uuid", "pid"]
INFO_LABELS = [
    *PROCESS_LABELS,
    "node",
    "user",
    "uid",
    "command",
    "container",
    "pod",
    "namespace",
    "slurm_job",  # `job` is Prometheus's own target label
    "project",
    "start_time",  # wall-clock start, for humans; a reused PID is another alert
    "start_ticks",  # start in clock ticks since boot: with boot_id, the identity the
    "boot_id",  # actuator checks (immune to wall-clock steps)
]


@dataclass
class ExporterSettings:
    node_name: str
    heartbeat_dir: Path | None = None
    log_globs: Sequence[str] = ()
    nvml_timeout: float = 1.5
    proc_root: Path = procfs.PROC


@dataclass
class _Families:
    """Every family this exporter yields, created empty at the start of a scrape."""

    gpu_info: GaugeMetricFamily = field(init=False)
    utilization: GaugeMetricFamily = field(init=False)
    memory_used: GaugeMetricFamily = field(init=False)
    memory_total: GaugeMetricFamily = field(init=False)
    device_up: GaugeMetricFamily = field(init=False)
    util_supported: GaugeMetricFamily = field(init=False)
    util_unknown: GaugeMetricFamily = field(init=False)
    p_memory: GaugeMetricFamily = field(init=False)
    p_util: GaugeMetricFamily = field(init=False)
    p_start: GaugeMetricFamily = field(init=False)
    p_cpu: CounterMetricFamily = field(init=False)
    p_heartbeat: GaugeMetricFamily = field(init=False)
    p_log: GaugeMetricFamily = field(init=False)
    p_info: GaugeMetricFamily = field(init=False)

    def __post_init__(self) -> None:
        g = GaugeMetricFamily
        self.gpu_info = g(
            "gpu_info",
            "GPU identity (1 per GPU NVML answers for).",
            labels=[*GPU_LABELS, "name", "driver_version", "node"],
        )
        self.utilization = g("gpu_utilization_ratio", "Device utilisation, 0-1.", labels=GPU_LABELS)
        self.memory_used = g("gpu_memory_used_bytes", "Device memory used.", labels=GPU_LABELS)
        self.memory_total = g("gpu_memory_total_bytes", "Device memory total.", labels=GPU_LABELS)
        self.device_up = g(
            "gpu_exporter_device_up",
            "1 when NVML answers for this GPU, 0 on error (e.g. GPU is lost).",
            labels=["gpu"],
        )
        self.util_supported = g(
            "gpu_exporter_process_utilization_supported",
            "1 when per-process utilisation is available on this GPU, 0 when unknown.",
            labels=GPU_LABELS,
        )
        self.util_unknown = g(
            "gpu_exporter_process_utilization_unknown",
            "1 with the reason per-process utilisation is unknown on this GPU (not_supported, "
            "error, pid_mismatch, device_busy_unattributed, device_util_unknown, invalid_pid).",
            labels=[*GPU_LABELS, "reason"],
        )
        self.p_memory = g(
            "gpu_process_memory_used_bytes",
            "GPU memory one process holds on one GPU.",
            labels=PROCESS_LABELS,
        )
        self.p_util = g(
            "gpu_process_sm_utilization_ratio",
            "Per-process SM utilisation, 0-1; absent where unknown (unsupported, MIG).",
            labels=PROCESS_LABELS,
        )
        self.p_start = g(
            "gpu_process_start_time_seconds", "Process start, unix seconds.", labels=PROCESS_LABELS
        )
        self.p_cpu = CounterMetricFamily(
            "gpu_process_cpu_seconds",
            "User+system CPU seconds of the process and its descendants.",
            labels=PROCESS_LABELS,
        )
        self.p_heartbeat = g(
            "gpu_process_heartbeat_timestamp_seconds",
            "Last heartbeat the process wrote, unix seconds.",
            labels=PROCESS_LABELS,
        )
        self.p_log = g(
            "gpu_process_log_write_timestamp_seconds",
            "Last write to the process's stdout/stderr file or matching logs.",
            labels=PROCESS_LABELS,
        )
        self.p_info = g(
            "gpu_process_info", "Identity of a process holding GPU memory.", labels=INFO_LABELS
        )

    def __iter__(self) -> Iterator[Metric]:
        return iter(vars(self).values())


class GpuCollector(Collector):
    def __init__(
        self,
        reader: NvmlReader,
        settings: ExporterSettings,
        identities: IdentityCache,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.settings = settings
        self.identities = identities
        self.clock = clock
        self._read_nvml = BoundedCall(reader.read, settings.nvml_timeout)
        self._boot_time = procfs.boot_time(settings.proc_root)
        self._boot_id = procfs.boot_id(settings.proc_root)

    def describe(self) -> list[Metric]:
        return []  # collected on demand only: registering must not touch NVML

    def collect(self) -> Iterator[Metric]:
        started = self.clock()
        reading = self._safe_nvml_reading()
        families = _Families()
        if reading.up:
            self._add_readings(families, reading)
        yield from families
        yield GaugeMetricFamily(
            "gpu_exporter_nvml_up",
            "1 when NVML answered during this scrape; 0 when missing, failing or timed out.",
            value=1 if reading.up else 0,
        )
        yield GaugeMetricFamily(
            "gpu_exporter_scrape_duration_seconds",
            "Time this scrape took.",
            value=self.clock() - started,
        )

    def _safe_nvml_reading(self) -> NvmlReading:
        try:
            reading = self._read_nvml()
        except Exception as error:  # a broken source must never fail the scrape
            log.exception("reading NVML failed")
            return NvmlReading(up=False, error=str(error))
        if reading is None:
            log.warning("NVML did not answer within %.1fs", self.settings.nvml_timeout)
            return NvmlReading(up=False, error="timeout")
        return reading

    def _add_readings(self, families: _Families, reading: NvmlReading) -> None:
        settings = self.settings
        table = procfs.read_process_table(settings.proc_root)
        children = procfs.children_map(table)
        pids = {p.pid for gpu in reading.gpus for p in gpu.processes if p.pid in table}
        heartbeats = (
            read_heartbeats(
                settings.heartbeat_dir, [ProcessRef(pid) for pid in pids], settings.proc_root
            )
            if settings.heartbeat_dir is not None and pids
            else {}
        )
        live_keys: set[tuple[int, float]] = set()
        for index in reading.failed_gpus:
            families.device_up.add_metric([str(index)], 0)
        for gpu in reading.gpus:
            self._add_gpu(families, gpu, reading.driver_version)
            for process in gpu.processes:
                labels = [str(gpu.index), gpu.uuid, str(process.pid)]
                if process.memory_used is not None:
                    families.p_memory.add_metric(labels, process.memory_used)
                if process.sm_utilization is not None:
                    families.p_util.add_metric(labels, process.sm_utilization)
                stat = table.get(process.pid)
                if stat is None:  # NVML lists it, /proc does not (another PID namespace?)
                    continue
                started = self._boot_time + stat.start_ticks / procfs.CLOCK_TICKS
                live_keys.add((process.pid, started))
                families.p_start.add_metric(labels, started)
                cpu = procfs.tree_cpu_seconds(process.pid, table, children)
                if cpu is not None:
                    families.p_cpu.add_metric(labels, cpu)
                if process.pid in heartbeats:
                    families.p_heartbeat.add_metric(labels, heartbeats[process.pid])
                written = log_write_timestamp(process.pid, settings.log_globs, settings.proc_root)
                if written is not None:
                    families.p_log.add_metric(labels, written)
                identity = self.identities.get(process.pid, started)
                if identity is not None:
                    families.p_info.add_metric(
                        [
                            *labels,
                            settings.node_name,
                            identity.user,
                            str(identity.uid),
                            identity.command,
                            identity.container,
                            identity.pod,
                            identity.namespace,
                            identity.job,
                            identity.project,
                            f"{started:.2f}",
                            str(stat.start_ticks),
                            self._boot_id,
                        ],
                        1,
                    )
        self.identities.prune(live_keys)

    def _add_gpu(self, families: _Families, gpu: GpuReading, driver: str) -> None:
        labels = [str(gpu.index), gpu.uuid]
        families.device_up.add_metric([str(gpu.index)], 1)
        families.gpu_info.add_metric([*labels, gpu.name, driver, self.settings.node_name], 1)
        if gpu.utilization is not None:
            families.utilization.add_metric(labels, gpu.utilization)
        if gpu.memory_used is not None:
            families.memory_used.add_metric(labels, gpu.memory_used)
        if gpu.memory_total is not None:
            families.memory_total.add_metric(labels, gpu.memory_total)
        families.util_supported.add_metric(labels, 1 if gpu.process_util_supported else 0)
        if gpu.util_unknown_reason:
            families.util_unknown.add_metric([*labels, gpu.util_unknown_reason], 1)
