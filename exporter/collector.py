"""The Prometheus collector: fresh readings at every scrape. What is kept between scrapes
is only what cannot change while a process lives (its parent link, its identity, the text
of its label sets), each dropped when the process goes.

A process that exited is simply not yielded. Identity lives on ``gpu_process_info`` only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter import procfs
from exporter.exposition import Exposition, Family
from exporter.guard import BoundedCall
from exporter.heartbeat_reader import HeartbeatReader, ProcessRef
from exporter.identity import IdentityCache, ProcessIdentity
from exporter.logactivity import log_write_timestamp
from exporter.netactivity import (
    DEFAULT_FLOOR,
    DEFAULT_RENDEZVOUS_PORTS,
    DEFAULT_WINDOW,
    HeldListeners,
    NetworkMeter,
    NetworkReading,
    Rendezvous,
)
from exporter.netdiag import SocketsUnknown, SocketTables
from exporter.nvml_reader import GpuReading, NvmlReader, NvmlReading
from exporter.presence import UTMP, Presence, PresenceReader
from exporter.proctree import HostProcesses
from exporter.selfmetrics import own_families
from exporter.text import label

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
    "pod",  # the pod's name, from the kubelet
    "pod_uid",  # from the cgroup path
    "namespace",
    "slurm_job",  # `job` is Prometheus's own target label
    "project",
    "start_time",  # wall-clock start, for humans; a reused PID is another alert
    "start_ticks",  # start in clock ticks since boot: with boot_id, the identity the
    "boot_id",  # actuator checks (immune to wall-clock steps)
]
OWNER_LABELS = ["uid", "user"]  # one row per uid holding GPU memory on this node


@dataclass
class ExporterSettings:
    node_name: str
    heartbeat_dir: Path | None = None
    log_globs: Sequence[str] = ()
    nvml_timeout: float = 1.5
    proc_root: Path = procfs.PROC
    network: bool = True  # each GPU process tree's TCP sockets (exporter/netactivity.py)
    network_floor: int = DEFAULT_FLOOR  # keep-alive bytes per minute that are not work
    network_window: float = DEFAULT_WINDOW  # ...counted over this; a first reading is unknown
    rendezvous_ports: frozenset[int] = DEFAULT_RENDEZVOUS_PORTS  # a job's own, never a service
    presence: bool = True  # each GPU owner's sessions and notebook connections
    utmp: Path = UTMP


@dataclass
class _Families:
    """Every family this exporter yields, created empty at the start of a scrape."""

    gpu_info: Family = field(init=False)
    utilization: Family = field(init=False)
    memory_used: Family = field(init=False)
    memory_total: Family = field(init=False)
    power: Family = field(init=False)
    energy: Family = field(init=False)
    device_up: Family = field(init=False)
    util_supported: Family = field(init=False)
    util_unknown: Family = field(init=False)
    p_memory: Family = field(init=False)
    p_util: Family = field(init=False)
    p_start: Family = field(init=False)
    p_cpu: Family = field(init=False)
    p_heartbeat: Family = field(init=False)
    p_log: Family = field(init=False)
    p_listening: Family = field(init=False)
    p_net_activity: Family = field(init=False)
    p_net_unknown: Family = field(init=False)
    p_clients: Family = field(init=False)
    p_last_client: Family = field(init=False)
    p_net_watched: Family = field(init=False)
    p_info: Family = field(init=False)
    o_sessions: Family = field(init=False)
    o_idle: Family = field(init=False)
    o_notebooks: Family = field(init=False)

    def __post_init__(self) -> None:
        gpu, process = tuple(GPU_LABELS), tuple(PROCESS_LABELS)

        def g(name: str, doc: str, labels: tuple[str, ...]) -> Family:
            return Family(name, "gauge", doc, labels)

        self.gpu_info = g(
            "gpu_info",
            "GPU identity (1 per GPU NVML answers for).",
            (*gpu, "name", "driver_version", "node"),
        )
        self.utilization = g("gpu_utilization_ratio", "Device utilisation, 0-1.", gpu)
        self.memory_used = g("gpu_memory_used_bytes", "Device memory used.", gpu)
        self.memory_total = g("gpu_memory_total_bytes", "Device memory total.", gpu)
        self.power = g("gpu_power_usage_watts", "Board power draw now, watts.", gpu)
        self.energy = Family(
            "gpu_energy_consumed_joules",
            "counter",
            "Energy the board consumed since the driver loaded, joules.",
            gpu,
        )
        self.device_up = g(
            "gpu_exporter_device_up",
            "1 when NVML answers for this GPU, 0 on error (e.g. GPU is lost).",
            ("gpu",),
        )
        self.util_supported = g(
            "gpu_exporter_process_utilization_supported",
            "1 when per-process utilisation is available on this GPU, 0 when unknown.",
            gpu,
        )
        self.util_unknown = g(
            "gpu_exporter_process_utilization_unknown",
            "1 with the reason per-process utilisation is unknown on this GPU (not_supported, "
            "error, pid_mismatch, device_busy_unattributed, device_util_unknown, invalid_pid).",
            (*gpu, "reason"),
        )
        self.p_memory = g(
            "gpu_process_memory_used_bytes", "GPU memory one process holds on one GPU.", process
        )
        self.p_util = g(
            "gpu_process_sm_utilization_ratio",
            "Per-process SM utilisation, 0-1; absent where unknown (unsupported, MIG).",
            process,
        )
        self.p_start = g("gpu_process_start_time_seconds", "Process start, unix seconds.", process)
        self.p_cpu = Family(
            "gpu_process_cpu_seconds",
            "counter",
            "User+system CPU seconds of the process and its descendants.",
            process,
        )
        self.p_heartbeat = g(
            "gpu_process_heartbeat_timestamp_seconds",
            "Last heartbeat the process wrote, unix seconds.",
            process,
        )
        self.p_log = g(
            "gpu_process_log_write_timestamp_seconds",
            "Last write to the process's stdout/stderr file or matching logs.",
            process,
        )
        self.p_listening = g(
            "gpu_process_listening_sockets",
            "TCP sockets the process tree listens on; scope=loopback: bound to a loopback "
            "address only (reachable from this host alone), rendezvous: the job's own ports "
            "other hosts reach (bound to 0, MASTER_PORT, the configured rendezvous ports), "
            "external: any other address, a listener that may serve. Absent when it listens "
            "on none.",
            (*process, "scope"),
        )
        self.p_net_activity = g(
            "gpu_process_network_last_activity_timestamp_seconds",
            "When data last moved on the process tree's TCP connections by more than "
            "keep-alive traffic, unix seconds; absent until it has (or when unknown).",
            process,
        )
        self.p_net_unknown = g(
            "gpu_exporter_process_network_unknown",
            "1 with the reason the process tree's network evidence is unknown, not absent: "
            "its sockets could not be read (no permission, namespace gone), or the exporter "
            "has not yet watched it for a whole window (warming_up).",
            (*process, "reason"),
        )
        self.p_clients = g(
            "gpu_process_network_clients",
            "Connections the process tree accepted on a listener that may serve (scope "
            "external), open now: its clients. Absent when it has no such listener.",
            process,
        )
        self.p_last_client = g(
            "gpu_process_network_last_client_timestamp_seconds",
            "When the exporter last saw a client connected to the process tree, unix "
            "seconds; absent until it has.",
            process,
        )
        self.p_net_watched = g(
            "gpu_process_network_watched_seconds",
            "How long the exporter has read the process tree's sockets: clients older than "
            "this were not seen (a service is unproven until it covers the service window).",
            process,
        )
        self.p_info = g(
            "gpu_process_info",
            "Identity of a process holding GPU memory.",
            tuple(INFO_LABELS),
        )
        owner = tuple(OWNER_LABELS)
        self.o_sessions = g(
            "gpu_owner_login_sessions",
            "Login sessions of a GPU process's owner on this node: live utmp records whose "
            "terminal the owner's uid owns.",
            owner,
        )
        self.o_idle = g(
            "gpu_owner_terminal_idle_seconds",
            "Seconds since the owner's most recently used terminal saw input (its atime, as "
            "`w` reads it); absent without a login session.",
            owner,
        )
        self.o_notebooks = g(
            "gpu_owner_notebook_connections",
            "Connections the owner's Jupyter servers have accepted (an open browser tab "
            "holds its websockets there); absent where their sockets cannot be read.",
            owner,
        )

    def __iter__(self) -> Iterator[Family]:
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
        self._host = HostProcesses(settings.proc_root)
        self._heartbeats = HeartbeatReader(settings.proc_root)
        self._sockets = SocketTables(str(settings.proc_root)) if settings.network else None
        self._network = (
            NetworkMeter(
                self._sockets,
                floor=settings.network_floor,
                window=settings.network_window,
                rendezvous=Rendezvous.of_host(settings.rendezvous_ports, str(settings.proc_root)),
            )
            if self._sockets
            else None
        )
        self._presence = (
            PresenceReader(utmp=settings.utmp, proc_root=settings.proc_root, sockets=self._sockets)
            if settings.presence
            else None
        )
        self._exposition = Exposition()
        # The state kept between scrapes (process tree, info labels, rendered lines) is
        # changed under this lock, whichever path (/metrics, the library) scrapes.
        self._state_lock = threading.Lock()
        self._info: dict[
            tuple[tuple[str, ...], float], tuple[ProcessIdentity, tuple[str, ...]]
        ] = {}

    def describe(self) -> list[Metric]:
        return []  # collected on demand only: registering must not touch NVML

    def families(self) -> list[Family]:
        """One scrape's families (reads NVML and /proc now)."""
        started = self.clock()
        reading = self._safe_nvml_reading()
        families = _Families()
        if reading.up:
            with self._state_lock:
                self._add_readings(families, reading)
        up = Family(
            "gpu_exporter_nvml_up",
            "gauge",
            "1 when NVML answered during this scrape; 0 when missing, failing or timed out.",
        )
        up.add((), 1 if reading.up else 0)
        took = Family("gpu_exporter_scrape_duration_seconds", "gauge", "Time this scrape took.")
        took.add((), self.clock() - started)
        return [*families, up, took, *own_families("gpu_exporter")]

    def collect(self) -> Iterator[Metric]:
        for family in self.families():
            yield family.to_metric()

    def exposition(self, *, openmetrics: bool = False, names: list[str] | None = None) -> bytes:
        """One scrape in the text format (or OpenMetrics): the hot path of /metrics.
        `names` (the `name[]` query) keeps only those families, by family or sample name."""
        families = self.families()
        if names is not None:
            wanted = set(names)
            families = [f for f in families if wanted & {f.name, f.name + "_total"}]
        with self._state_lock:
            return self._exposition.render(families, openmetrics=openmetrics)

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
        host = self._host
        host.refresh()
        # Fresh stats of the GPU processes only: the rest of the host costs one listing.
        stats: dict[int, procfs.ProcStat] = {}
        for gpu in reading.gpus:
            for p in gpu.processes:
                if p.pid not in stats and p.pid in host:
                    stat = procfs.read_stat(p.pid, settings.proc_root)
                    if stat is not None:
                        stats[p.pid] = stat
        heartbeats = (
            self._heartbeats.read(
                settings.heartbeat_dir,
                [ProcessRef(pid, stat.start_ticks) for pid, stat in stats.items()],
            )
            if settings.heartbeat_dir is not None and stats
            else {}
        )
        cpu_seconds: dict[int, float] = {}
        logs = {
            pid: log_write_timestamp(pid, settings.log_globs, settings.proc_root) for pid in stats
        }
        # A heartbeat or log written within the network window: progress, neither idle nor
        # stalled whatever its network says, so a tree known to have no listener that may
        # serve need not be read (netactivity.NetworkMeter.read_many).
        since = time.time() - settings.network_window
        progressing = {
            pid for pid in stats if max(heartbeats.get(pid) or 0.0, logs.get(pid) or 0.0) >= since
        }
        network = self._read_networks(stats, progressing)
        info: dict[tuple[tuple[str, ...], float], tuple[ProcessIdentity, tuple[str, ...]]] = {}
        live_keys: set[tuple[int, int]] = set()
        owners: set[int] = set()
        for index in reading.failed_gpus:
            families.device_up.add([str(index)], 0)
        for gpu in reading.gpus:
            self._add_gpu(families, gpu, reading.driver_version)
            for process in gpu.processes:
                labels = (str(gpu.index), gpu.uuid, str(process.pid))
                if process.memory_used is not None:
                    families.p_memory.add(labels, process.memory_used)
                if process.sm_utilization is not None:
                    families.p_util.add(labels, process.sm_utilization)
                stat = stats.get(process.pid)
                if stat is None:  # NVML lists it, /proc does not (another PID namespace?)
                    continue
                started = self._boot_time + stat.start_ticks / procfs.CLOCK_TICKS
                live_keys.add((process.pid, stat.start_ticks))
                families.p_start.add(labels, started)
                cpu = cpu_seconds.get(process.pid)
                if cpu is None:  # once per process, though it may hold several GPUs
                    cpu = cpu_seconds[process.pid] = host.tree_cpu_seconds(stat)
                families.p_cpu.add(labels, cpu)
                if process.pid in heartbeats:
                    families.p_heartbeat.add(labels, heartbeats[process.pid])
                if process.pid in network:
                    _add_network(families, labels, network[process.pid])
                written = logs.get(process.pid)
                if written is not None:
                    families.p_log.add(labels, written)
                identity = self.identities.get(process.pid, stat.start_ticks, gpu.uuid)
                if identity is not None:
                    owners.add(identity.uid)
                    key = (labels, started)
                    known = self._info.get(key)
                    if known is None or known[0] is not identity:
                        known = (identity, self._info_values(labels, identity, started, stat))
                    info[key] = known
                    families.p_info.add(known[1], 1)
        self._info = info  # kept while the series lives
        self._add_presence(families, owners)
        self.identities.prune(live_keys)
        if self._network is not None:
            self._network.prune(live_keys)

    def _add_presence(self, families: _Families, owners: set[int]) -> None:
        if self._presence is None or not owners:
            return
        try:
            seen = self._presence.read(owners)
        except Exception:  # evidence that only makes a decision gentler: absent, not fatal
            log.exception("reading the GPU owners' presence failed")
            return
        for presence in seen.values():
            _add_owner(families, presence)

    def _read_networks(
        self, stats: dict[int, procfs.ProcStat], progressing: set[int]
    ) -> dict[int, NetworkReading | HeldListeners | str]:
        """Each GPU process tree's network reading, or why it is unknown (one pass); a tree
        that progresses may be left unread (absent)."""
        if self._network is None or self._sockets is None:
            return {}
        trees = {
            (pid, stat.start_ticks): [pid, *self._host.descendants(pid)]
            for pid, stat in stats.items()
        }
        self._sockets.begin()
        try:
            found = self._network.read_many(
                trees, [(pid, stats[pid].start_ticks) for pid in progressing]
            )
        finally:
            self._sockets.end()
        return {
            pid: net.reason if isinstance(net, SocketsUnknown) else net
            for (pid, _), net in found.items()
        }

    def _info_values(
        self,
        labels: tuple[str, ...],
        identity: ProcessIdentity,
        started: float,
        stat: procfs.ProcStat,
    ) -> tuple[str, ...]:
        return (
            *labels,
            self.settings.node_name,
            identity.user,
            str(identity.uid),
            identity.command,
            identity.container,
            identity.pod,
            identity.pod_uid,
            identity.namespace,
            identity.job,
            identity.project,
            f"{started:.2f}",
            str(stat.start_ticks),
            self._boot_id,
        )

    def _add_gpu(self, families: _Families, gpu: GpuReading, driver: str) -> None:
        labels = [str(gpu.index), gpu.uuid]
        families.device_up.add([str(gpu.index)], 1)
        families.gpu_info.add([*labels, gpu.name, driver, self.settings.node_name], 1)
        if gpu.utilization is not None:
            families.utilization.add(labels, gpu.utilization)
        if gpu.memory_used is not None:
            families.memory_used.add(labels, gpu.memory_used)
        if gpu.memory_total is not None:
            families.memory_total.add(labels, gpu.memory_total)
        if gpu.power_watts is not None:
            families.power.add(labels, gpu.power_watts)
        if gpu.energy_joules is not None:
            families.energy.add(labels, gpu.energy_joules)
        families.util_supported.add(labels, 1 if gpu.process_util_supported else 0)
        if gpu.util_unknown_reason:
            families.util_unknown.add([*labels, gpu.util_unknown_reason], 1)


def _add_owner(families: _Families, presence: Presence) -> None:
    labels = (str(presence.uid), label(presence.user))
    families.o_sessions.add(labels, len(presence.sessions))
    if presence.idle_seconds is not None:
        families.o_idle.add(labels, round(presence.idle_seconds, 1))
    if presence.notebook_connections is not None:
        families.o_notebooks.add(labels, presence.notebook_connections)


def _add_network(
    families: _Families, labels: tuple[str, ...], net: NetworkReading | HeldListeners | str
) -> None:
    if isinstance(net, str):
        families.p_net_unknown.add((*labels, net), 1)
        return
    if isinstance(net, HeldListeners):  # not read while it progresses: its listeners only
        if net.loopback or net.rendezvous:
            for scope, count in (("loopback", net.loopback), ("external", 0)):
                families.p_listening.add((*labels, scope), count)
            families.p_listening.add((*labels, "rendezvous"), net.rendezvous)
        return
    if not net.covered:  # a first reading says nothing of what moved before it
        families.p_net_unknown.add((*labels, "warming_up"), 1)
    listening = (net.listening_loopback, net.listening_external, net.listening_rendezvous)
    if any(listening):  # absent: it listens on nothing
        for scope, count in zip(("loopback", "external", "rendezvous"), listening, strict=True):
            families.p_listening.add((*labels, scope), count)
    if net.listening_external:
        families.p_clients.add(labels, net.clients)
    if net.last_client is not None:
        families.p_last_client.add(labels, net.last_client)
    families.p_net_watched.add(labels, round(net.watched_for, 3))
    if net.last_activity is not None:
        families.p_net_activity.add(labels, net.last_activity)
