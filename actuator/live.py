"""The live re-check: what the node says about one target right now.

It judges the same evidence as the alert rules with the exporter's own readers: the NVML
reading (with its sample-join proof), the /proc pass and process-tree CPU, log activity
(stdout/stderr files and the configured globs) and heartbeats. Only the process tree and
the protection are the actuator's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from actuator.models import KEEP_VARIABLE, Excluded, LiveState, Member, OwnerPresence, Target
from actuator.protect import Protection, command_names
from exporter import procfs
from exporter.cgroup import read_cgroup_identity
from exporter.heartbeat_reader import ProcessRef, read_heartbeats
from exporter.identity import ProjectMapping, command_name, group_name, user_name
from exporter.kube.pod_resources import PodLocator, PodRef
from exporter.logactivity import log_write_timestamp
from exporter.netactivity import (
    DEFAULT_FLOOR,
    DEFAULT_RENDEZVOUS_PORTS,
    DEFAULT_WINDOW,
    NetworkMeter,
    NetworkReading,
    Rendezvous,
)
from exporter.netdiag import SocketsUnknown, SocketTables
from exporter.nvml_reader import GpuReading, NvmlReading
from exporter.presence import UTMP, PresenceReader
from exporter.procfs import ProcStat
from exporter.slurm import slurm_job_of

POD_LIST_MAX_AGE = 0.25  # as the shared NVML reading (actuator/node.py)
# Where the kernel keeps no lists of children: one whole-host /proc pass serves the cases
# re-checked within this long (one tick's run through a node's cases); it only says who
# descends from whom, and every member's CPU and state are read fresh at each re-check.
TABLE_MAX_AGE = 0.1
# A process not re-checked for this long starts its network metering afresh.
NETWORK_METER_MAX_AGE = 3600.0


MPS_SERVER = "nvidia-cuda-mps-server"  # the MPS server's executable
# An owner's presence as read: their sessions, and their notebook servers' connections by pid.
SeenPresence = tuple[OwnerPresence, dict[int, int | None]]
PRESENCE_MAX_AGE = 10.0  # seconds an owner's presence reading is reused across re-checks


@dataclass(frozen=True)
class Evidence:
    """Where the node's evidence comes from (the exporter's settings, repeated)."""

    heartbeat_dir: Path | None = None
    log_globs: Sequence[str] = ()
    projects: ProjectMapping | None = None
    proc_root: Path = procfs.PROC
    pods: PodLocator | None = None  # the kubelet's pod-resources API
    network: bool = True  # the trees' TCP sockets (listeners, data beyond keep-alive)
    network_floor: int = DEFAULT_FLOOR  # keep-alive bytes per minute, as the exporter's
    network_window: float = DEFAULT_WINDOW  # ...counted over this, as the exporter's
    rendezvous_ports: frozenset[int] = DEFAULT_RENDEZVOUS_PORTS  # a job's own, as the exporter's
    utmp: Path | None = UTMP  # the owner's login sessions, as the exporter's (None: not read)


@dataclass(frozen=True)
class Tree:
    root: ProcStat
    uid: int
    members: tuple[Member, ...]  # root first, then descendants, parents before children
    excluded: tuple[Excluded, ...]


def process_tree(
    root: ProcStat,
    uid: int,
    table: dict[int, ProcStat],
    protection: Protection,
    proc_root: Path,
    children: dict[int, list[int]] | None = None,
) -> Tree:
    """The target and its descendants of the same uid that are not protected. A process of
    another uid, or a protected one, is excluded (with the reason) and not descended into."""
    children = procfs.children_map(table) if children is None else children
    members = [Member(root.pid, root.start_ticks, uid)]
    excluded: list[Excluded] = []
    queue = list(children.get(root.pid, ()))
    seen = {root.pid}
    while queue:
        pid = queue.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        stat = table.get(pid)
        if stat is None or stat.is_zombie:
            continue
        status = procfs.read_status(pid, proc_root)
        if status is None:
            continue  # exited meanwhile
        if status.uid != uid:
            excluded.append(Excluded(pid, f"uid {status.uid}, not the target's uid {uid}"))
            continue
        why = protection.reason(stat, status)
        if why is not None:
            excluded.append(Excluded(pid, f"protected: {why}"))
            continue
        members.append(Member(pid, stat.start_ticks, uid))
        queue.extend(children.get(pid, ()))
    return Tree(root, uid, tuple(members), tuple(excluded))


class Inspector:
    def __init__(
        self,
        protection: Protection,
        nvml: Callable[[float], NvmlReading | None],  # (taken after this wall time)
        evidence: Evidence,
        *,
        nvml_timeout: float,
        clock: Callable[[], float] = time.time,
        table_max_age: float = TABLE_MAX_AGE,
        mono: Callable[[], float] = time.monotonic,
        kernel_lists: bool = True,
    ) -> None:
        self.protection = protection
        self.kernel_lists = kernel_lists  # False: always the shared pass (benchmarks)
        self.table_max_age, self._mono = table_max_age, mono
        self._table_lock = threading.Lock()
        self._table: tuple[float, dict[int, list[int]]] | None = None
        self.nvml = nvml
        self.evidence = evidence
        self.nvml_timeout = nvml_timeout
        self.clock = clock
        root = evidence.proc_root
        self._boot_time = procfs.boot_time(root)
        self._boot_id = procfs.boot_id(root)
        self._presence_lock = threading.Lock()
        # Per uid: when read, their sessions, and their notebook servers' connections (by pid).
        self._presence: dict[int, tuple[float, SeenPresence | None]] = {}
        # One meter for every re-check on this node: a tree's first reading is its baseline,
        # and data moved after it (a served request during the grace) is activity.
        self._network_lock = threading.Lock()
        self._network = (
            NetworkMeter(
                SocketTables(str(root)),
                floor=evidence.network_floor,
                window=evidence.network_window,
                clock=clock,
                rendezvous=Rendezvous.of_host(evidence.rendezvous_ports, str(root)),
            )
            if evidence.network
            else None
        )

    @property
    def proc_root(self) -> Path:
        return self.evidence.proc_root

    @property
    def boot_id(self) -> str:
        """This boot's id, read once: a boot id never changes under a running process."""
        return self._boot_id

    def _presence_of(self, uid: int, pid: int) -> OwnerPresence | None:
        """The owner's presence for their process `pid` through the exporter's own reader
        (None: not read): their login sessions, and the connections to the notebook servers
        `pid` runs under (its kernel's server: a tab open on another notebook says nothing
        of this one). Read at most every PRESENCE_MAX_AGE seconds per uid: finding notebook
        servers lists /proc."""
        if self.evidence.utmp is None:
            return None
        with self._presence_lock:
            cached = self._presence.get(uid)
        if cached is None or self._mono() - cached[0] >= PRESENCE_MAX_AGE:
            cached = (self._mono(), self._read_presence(uid))
            with self._presence_lock:
                self._presence[uid] = cached
        seen = cached[1]
        if seen is None:
            return None
        presence, servers = seen
        # The lineage walk reads a stat per ancestor: only worth it under a notebook server.
        lineage = ancestry(pid, self.proc_root) if servers else set()
        return replace(presence, notebook_connections=connections_under(servers, lineage))

    def _read_presence(self, uid: int) -> SeenPresence | None:
        assert self.evidence.utmp is not None
        tables = SocketTables(str(self.proc_root)) if self.evidence.network else None
        reader = PresenceReader(
            utmp=self.evidence.utmp, proc_root=self.proc_root, sockets=tables, clock=self.clock
        )
        try:
            # Sessions and each server's own count, not read's per-uid sum: a connection
            # counts only for the kernels under its server (connections_under).
            sessions = reader.sessions({uid})[uid]
            servers = {pid: count for (pid, _), count in reader.notebook_servers({uid}).items()}
        except OSError:
            return None  # unknown presence is absence
        finally:
            if tables is not None:
                tables.close()
        latest = min(sessions, key=lambda s: s.idle_seconds, default=None)
        presence = OwnerPresence(
            sessions=len(sessions),
            idle_seconds=latest.idle_seconds if latest else None,
            terminal=latest.terminal if latest else "",
        )
        return presence, servers

    def _mps_on(self, gpu: GpuReading) -> bool:
        """An MPS server is among the GPU's processes (by its executable's name)."""
        return any(procfs.read_exe_name(p.pid, self.proc_root) == MPS_SERVER for p in gpu.processes)

    def _host_children(self) -> dict[int, list[int]]:
        """Parent -> children of every process on the host, from a /proc pass at most
        `table_max_age` old (shared by the re-checks of one tick)."""
        with self._table_lock:
            now = self._mono()
            if self._table is None or now - self._table[0] > self.table_max_age:
                table = procfs.read_process_table(self.proc_root)
                self._table = (now, procfs.children_map(table))
            return self._table[1]

    def _tree_stats(self, root: ProcStat) -> dict[int, ProcStat]:
        """Fresh stats of `root` and of its descendants: from the kernel's lists of children
        (the tree as it is now, read alone), or where there are none as the shared pass
        knows them (a child forked since then is seen at the next re-check; one gone is
        skipped)."""
        found = procfs.read_subtree(root.pid, self.proc_root) if self.kernel_lists else None
        if found is not None:
            found[root.pid] = root
            return found
        host = self._host_children()
        fresh = {root.pid: root}
        stack = list(host.get(root.pid, ()))
        while stack:
            pid = stack.pop()
            if pid in fresh:
                continue
            stat = procfs.read_stat(pid, self.proc_root)
            if stat is not None:
                fresh[pid] = stat
                stack.extend(host.get(pid, ()))
        return fresh

    def gpu(self, uuid: str, not_before: float = float("-inf")) -> tuple[GpuReading | None, str]:
        """The GPU's reading (taken after `not_before`, wall clock), or (None, why unknown /
        "not found")."""
        reading = self.nvml(not_before)
        if reading is None:
            return None, f"NVML did not answer within {self.nvml_timeout:g}s"
        if not reading.up:
            return None, f"NVML is down: {reading.error}"
        for gpu in reading.gpus:
            if gpu.uuid == uuid:
                return gpu, ""
        if reading.failed_gpus:
            return None, f"GPU(s) {list(reading.failed_gpus)} fail in NVML; {uuid} unknown"
        return None, "not found"

    def _pod(self, pod_uid: str, uuid: str) -> tuple[PodRef | None, str]:
        """The pod holding the GPU, from a List at most POD_LIST_MAX_AGE old (one List for
        the cases re-checked in a tick); (None, why) for a pod process it cannot name.
        Which pod is acted on is proven later, against the API server's UID."""
        if not pod_uid or self.evidence.pods is None:
            return None, ""
        try:
            pod = self.evidence.pods.locate(uuid, max_age=POD_LIST_MAX_AGE)
        except Exception as exc:  # the kubelet's client: a failure is unknown, never a pod
            return None, f"the kubelet's pod-resources API failed: {exc}"
        return pod, "" if pod else f"the kubelet names no single pod holding GPU {uuid}"

    def inspect(self, target: Target) -> LiveState:
        now = self.clock()
        root_dir = self.proc_root
        stat = procfs.read_stat(target.pid, root_dir)
        if stat is None:
            return LiveState(sampled_at=now, exists=False)
        if stat.is_zombie:
            return LiveState(
                sampled_at=now,
                exists=False,
                errors=(f"zombie, not yet reaped by its parent pid {stat.ppid}",),
            )
        status = procfs.read_status(target.pid, root_dir)
        if status is None:
            return LiveState(sampled_at=now, exists=True, errors=("cannot read its status",))
        argv = procfs.read_cmdline(target.pid, root_dir)
        names = command_names(target.pid, root_dir)
        identity = LiveState(
            sampled_at=now,
            exists=True,
            start_ticks=stat.start_ticks,
            boot_id=self._boot_id,
            start_time=self._boot_time + stat.start_ticks / procfs.CLOCK_TICKS,
            uid=status.uid,
            user=user_name(status.uid),
            command=" ".join(names),
            program=command_name(argv),
            cmdline=" ".join(argv),
        )
        if stat.start_ticks != target.start_ticks or self._boot_id != target.boot_id:
            return identity  # another process has this PID: look no further
        groups = tuple(group_name(g) for g in dict.fromkeys((status.gid, *status.groups)))
        container = read_cgroup_identity(target.pid, root_dir)
        pod, pod_error = self._pod(container.pod, target.uuid)
        namespace = pod.namespace if pod else ""
        slurm_job = slurm_job_of(target.pid, root_dir, container.slurm_job)
        mapping = self.evidence.projects
        project = mapping.project_for(identity.user or "", groups, namespace) if mapping else ""
        table = self._tree_stats(stat)
        children = procfs.children_map(table)  # by the fresh stats' own parent links
        tree = process_tree(stat, status.uid, table, self.protection, root_dir, children)
        cpu = procfs.tree_cpu_seconds(target.pid, table, children)
        errors: list[str] = [pod_error] if pod_error else []
        # A reading from before the process started would say it is not on the GPU.
        gpu, why = self.gpu(target.uuid, not_before=identity.start_time or 0.0)
        gpu_found: bool | None = None if gpu is None and why != "not found" else gpu is not None
        on_gpu = mem = util = None
        util_unknown = ""
        if gpu is None and why != "not found":
            errors.append(why)
        if gpu is not None:
            listed = {p.pid: p for p in gpu.processes}
            on_gpu = target.pid in listed  # the target itself, not any descendant
            held = [listed[m.pid] for m in tree.members if m.pid in listed]
            sizes = [p.memory_used for p in held]
            mem = None if None in sizes else sum(s for s in sizes if s is not None)
            utils = [p.sm_utilization for p in held]
            if gpu.util_unknown_reason:
                util_unknown = gpu.util_unknown_reason
            elif held and None not in utils:
                util = max(u for u in utils if u is not None)
        net, net_unknown = self._network_of(target, [m.pid for m in tree.members])
        logs = [log_write_timestamp(m.pid, self.evidence.log_globs, root_dir) for m in tree.members]
        written = [t for t in logs if t is not None]
        heartbeat = None
        if self.evidence.heartbeat_dir is not None:
            beats = read_heartbeats(self.evidence.heartbeat_dir, [ProcessRef(target.pid)], root_dir)
            heartbeat = beats.get(target.pid)
        return replace(
            identity,
            groups=groups,
            namespace=namespace,
            pod=pod.name if pod else "",
            pod_uid=container.pod,
            pod_container=pod.container if pod else "",
            slurm_job=slurm_job,
            project=project,
            protected=self.protection.reason(stat, status, names),
            gpu_found=gpu_found,
            gpu_index=gpu.index if gpu is not None else None,
            gpu_model=gpu.name if gpu is not None else "",
            on_gpu=on_gpu,
            gpu_memory_bytes=mem,
            gpu_used_bytes=gpu.memory_used if gpu is not None else None,
            mps_on_gpu=self._mps_on(gpu) if gpu is not None else None,
            sm_util=util,
            util_unknown=util_unknown,
            cpu_seconds=cpu,
            log_mtime=max(written) if written else None,
            heartbeat=heartbeat,
            power_share_watts=power_share(gpu, mem),
            listening_external=net.listening_external if net is not None else None,
            listen_ports=tuple(sorted(net.ports)) if net is not None else (),
            network_activity=net.last_activity if net is not None else None,
            network_unknown=net_unknown,
            listening_rendezvous=net.listening_rendezvous if net is not None else 0,
            network_clients=net.clients if net is not None else 0,
            client_ago=net.client_ago if net is not None else None,
            network_watched_for=net.watched_for if net is not None else None,
            network_covered=net.covered if net is not None else None,
            keep_asked=_keep_asked(procfs.read_environ_value(target.pid, KEEP_VARIABLE, root_dir)),
            presence=self._presence_of(status.uid, target.pid),
            members=tree.members,
            excluded=tree.excluded,
            errors=tuple(errors),
        )

    def _network_of(self, target: Target, pids: list[int]) -> tuple[NetworkReading | None, str]:
        """The tree's network reading, metered across re-checks; (None, why) when unknown,
        (None, "") when this node does not read networks."""
        if self._network is None:
            return None, ""
        with self._network_lock:
            tables = self._network.tables
            tables.begin()
            try:
                return self._network.read((target.pid, target.start_ticks), pids), ""
            except SocketsUnknown as exc:
                return None, str(exc)
            finally:
                tables.end()
                self._network.forget_unread(NETWORK_METER_MAX_AGE)


def _keep_asked(value: str | None) -> str | None:
    return f"{KEEP_VARIABLE}={value}" if value is not None else None


def ancestry(pid: int, proc_root: Path = procfs.PROC, limit: int = 64) -> set[int]:
    """`pid` and the processes above it, by their parent links (at most `limit` levels)."""
    lineage, current = {pid}, pid
    for _ in range(limit):
        stat = procfs.read_stat(current, proc_root)
        if stat is None or stat.ppid <= 1 or stat.ppid in lineage:
            break
        lineage.add(stat.ppid)
        current = stat.ppid
    return lineage


def connections_under(servers: dict[int, int | None], lineage: set[int]) -> int | None:
    """Connections to the notebook servers among `lineage` (a kernel's own server, or the
    server itself): 0 where it runs under none, None where one of them is unreadable."""
    counts = [count for pid, count in servers.items() if pid in lineage]
    if any(count is None for count in counts):
        return None
    return sum(count for count in counts if count is not None)


def power_share(gpu: GpuReading | None, memory: int | None) -> float | None:
    """The GPU's board power shared by memory held: what keeping `memory` on it costs
    (the rules' gpu_process:power_share_watts). None when anything is unknown."""
    if gpu is None or gpu.power_watts is None or memory is None:
        return None
    held = [p.memory_used for p in gpu.processes]
    if None in held:
        return None
    total = sum(m for m in held if m is not None)
    return gpu.power_watts * memory / total if total > 0 else None


def target_of(node: str, pid: int, uuid: str, proc_root: Path = procfs.PROC) -> Target:
    """The Target naming a live process as the exporter would (for tools and tests)."""
    stat = procfs.read_stat(pid, proc_root)
    if stat is None:
        raise ProcessLookupError(pid)
    started = procfs.boot_time(proc_root) + stat.start_ticks / procfs.CLOCK_TICKS
    return Target(node, pid, stat.start_ticks, procfs.boot_id(proc_root), uuid, started)
