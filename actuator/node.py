"""The actuator's hands on a GPU node: live re-checks and signals.

`Node` is the narrow interface the reconciler uses. `LocalNode` implements it for the node
the actuator runs on by composing the live inspection (actuator/live.py, on the exporter's
readers), the protection (actuator/protect.py) and pidfd signalling (actuator/pidfds.py).
A node agent serves the same interface over mutual TLS (actuator/fleet/).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from actuator.checkpoint import CheckpointResult, Remap, SimCheckpointer, checkpointer_for
from actuator.config import NodeConfig
from actuator.host_memory import CGROUP, checkpoint_room
from actuator.live import Evidence, Inspector, process_tree
from actuator.models import LiveState, Member, SignalResult, Target
from actuator.pidfds import Pidfds
from actuator.policy import Protect
from actuator.protect import Protection
from actuator.rehearsal import Rehearsal
from actuator.restore_place import Placement, place_restore, rooms
from exporter import procfs
from exporter.guard import BoundedCall
from exporter.identity import ProjectMapping
from exporter.nvml import resolve_sim_dir
from exporter.nvml_reader import NvmlReader, NvmlReading
from exporter.slurm import slurm_job_of

if TYPE_CHECKING:  # grpc loads only where the kubelet's API is configured
    from exporter.kube.pod_resources import PodResources

# A trusted exporter answers within 2 s; the re-check gives NVML no longer.
NVML_TIMEOUT = 2.0
READING_TTL = 0.25  # several cases checked in one tick share one NVML reading


class NodeUnreachable(Exception):
    """The node's agent did not give a usable answer (the node itself is not judged)."""


class Node(Protocol):
    name: str

    def inspect(self, target: Target) -> LiveState: ...

    def inspect_many(self, targets: Sequence[Target]) -> list[LiveState]:
        """Several re-checks, in the order given: a node's due cases, one round trip."""
        ...

    def alive(self, members: Iterable[Member]) -> list[Member]: ...

    def gpu_processes(self, uuid: str) -> dict[int, int] | None: ...

    def monitored_count(self) -> int | None: ...

    def job_processes(self, job: str) -> list[Target] | None:
        """The GPU processes of Slurm job `job` on this node (None: cannot tell)."""
        ...

    def signal_tree(
        self,
        target: Target,
        members: Iterable[Member],
        sig: signal.Signals,
        *,
        dry_run: bool,
        key: str | None = None,
    ) -> list[SignalResult]:
        """Signal the tree; `key` names the escalation step, so a remote node carries a
        retried step out once."""
        ...

    def rehearse_many(self, rehearsals: Sequence[Rehearsal]) -> list[list[SignalResult]]:
        """Dry runs of several steps, in the order given (a node's rehearsals of a pass,
        one round trip): what each would send, nothing sent."""
        ...

    def wait_exit(self, timeout: float) -> None: ...

    def suspend(
        self, target: Target, lock_timeout: float, *, key: str | None = None
    ) -> CheckpointResult:
        """Checkpoint the process's GPU state into its host memory (the suspend rung);
        `key` names the step, so a remote node carries a retried one out once."""
        ...

    def resume(
        self,
        target: Target,
        *,
        need: int | None = None,
        avoid: tuple[str, ...] = (),
        key: str | None = None,
    ) -> CheckpointResult:
        """Restore a suspended process and let it run: onto its own GPU, else another of
        the same chip, one seen with `need` bytes free and not in `avoid` (GPUs given to a
        waiter); no such GPU: not tried (`no_room`). `need` None: the driver judges."""
        ...


NO_CHECKPOINT = CheckpointResult(False, "", "this node cannot checkpoint a process")


class _SharedReading:
    """One bounded NVML reading, reused for READING_TTL seconds, but never for a process
    that started after it was taken: it cannot say such a process is not on the GPU.

    One reading at a time: callers that come while it is taken wait for it and share it.
    (The bounded call answers None to a second caller while the first call runs, as if
    NVML were wedged: concurrent callers, say the reconciler and the wait list, would read
    "unknown" for no reason.)"""

    def __init__(self, read: Callable[[], NvmlReading | None]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._reading = threading.Lock()  # held while the reading is taken
        self._at = float("-inf")
        self._wall = float("-inf")
        self._value: NvmlReading | None = None

    def _fresh(self, not_before: float) -> bool:
        return time.monotonic() - self._at < READING_TTL and self._wall >= not_before

    def __call__(self, not_before: float = float("-inf")) -> NvmlReading | None:
        """`not_before`: wall-clock time the reading must be taken after."""
        with self._lock:
            if self._fresh(not_before):
                return self._value
        with self._reading:
            with self._lock:  # taken meanwhile by the caller this one waited for?
                if self._fresh(not_before):
                    return self._value
            wall = time.time()
            value = self._read()
            with self._lock:
                self._value, self._at, self._wall = value, time.monotonic(), wall
            return value


class LocalNode:
    """The node this process runs on."""

    def __init__(
        self,
        name: str,
        protect: Protect,
        *,
        nvml: Any | None = None,
        sim_dir: str | None = None,
        sm_window: float = 10.0,
        nvml_timeout: float = NVML_TIMEOUT,
        evidence: Evidence | None = None,
        runtime_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        evidence = evidence or Evidence()
        self.proc_root = evidence.proc_root
        self.cgroup_root = CGROUP  # where the memory cgroups a checkpoint is charged to are
        auto = nvml is None  # the node's own driver (or simulation): its checkpoint too
        if nvml is None:
            from exporter.nvml import open_nvml

            nvml = open_nvml(sim_dir)
        reader = NvmlReader(nvml, min_window_us=int(sm_window * 1_000_000))
        self._bounded = BoundedCall(reader.read, nvml_timeout)
        self._reading = _SharedReading(self._bounded)
        self.protection = Protection(protect, proc_root=self.proc_root, runtime_dir=runtime_dir)
        self.inspector = Inspector(
            self.protection, self._reading, evidence, nvml_timeout=nvml_timeout, clock=clock
        )
        self.pidfds = Pidfds(self.proc_root)
        self.checkpointer = checkpointer_for(resolve_sim_dir(sim_dir)) if auto else None

    # -- evidence ------------------------------------------------------------------------

    def inspect(self, target: Target) -> LiveState:
        return self.inspect_many([target])[0]

    def inspect_many(self, targets: Sequence[Target]) -> list[LiveState]:
        lives = [self.inspector.inspect(target) for target in targets]
        if self.checkpointer is None:
            return lives
        # A simulated driver's room is the simulated host's, one figure for the node: read
        # once for the batch. A real one's is the kernel's and each process's memory
        # cgroups' (actuator/host_memory.py), the tighter, read per process.
        room: int | None = None
        room_read = False
        found = []
        for target, live in zip(targets, lives, strict=True):
            if not self._same(target):
                found.append(live)
                continue
            if not room_read:
                room, room_read = self.checkpointer.host_room(), True
            state = self.checkpointer.state(target.pid)
            if room is None and isinstance(self.checkpointer, SimCheckpointer):
                found.append(replace(live, checkpoint_state=state))
                continue
            found.append(
                replace(
                    live,
                    checkpoint_state=state,
                    host_memory_available=room
                    if room is not None
                    else checkpoint_room(target.pid, self.proc_root, self.cgroup_root),
                )
            )
        return found

    def _same(self, target: Target) -> bool:
        """The process under the PID is the target (its start ticks, this boot: the boot id
        read when the agent started, as no agent outlives its boot)."""
        return (
            self.inspector.boot_id == target.boot_id
            and procfs.start_ticks(target.pid, self.proc_root) == target.start_ticks
        )

    # -- the suspend rung ----------------------------------------------------------------

    def suspend(
        self, target: Target, lock_timeout: float, *, key: str | None = None
    ) -> CheckpointResult:
        if self.checkpointer is None:
            return NO_CHECKPOINT
        if not self._same(target):
            return CheckpointResult(False, "", "gone or identity changed")
        return self.checkpointer.suspend(target.pid, lock_timeout)

    def resume(
        self,
        target: Target,
        *,
        need: int | None = None,
        avoid: tuple[str, ...] = (),
        key: str | None = None,
    ) -> CheckpointResult:
        if self.checkpointer is None:
            return NO_CHECKPOINT
        if not self._same(target):
            return CheckpointResult(False, "", "gone or identity changed")
        placed = self._place(target.uuid, need, avoid)
        if placed is None:  # no need given, or its GPU unread: the driver judges the room
            return self.checkpointer.resume(target.pid)
        state = self.checkpointer.state(target.pid)
        if placed.gpu is None:  # a restore into a GPU without room fails, or worse, hangs
            return CheckpointResult(False, state, f"{placed.why}: not restored", no_room=True)
        remap = None
        if placed.moved:
            remap = Remap(target.uuid, placed.gpu.uuid, placed.gpu.index)
        done = self.checkpointer.resume(target.pid, remap)
        onto = remap.new_uuid if remap is not None and done.ok else ""
        return replace(done, detail=f"{done.detail} ({placed.why})", onto=onto)

    def _place(self, own: str, need: int | None, avoid: tuple[str, ...]) -> Placement | None:
        """Where the restore goes, on a reading taken now (None: the driver judges: no need
        given, or its GPU unread. Unread is not "no room": a refused try counts toward the
        SIGTERM after the last, so a broken NVML must not end a suspended process)."""
        if need is None:
            return None
        gpus = rooms(self._reading(time.time()))
        return place_restore(own, need, gpus, avoid) if gpus is not None else None

    def gpu_processes(self, uuid: str) -> dict[int, int] | None:
        gpu, _ = self.inspector.gpu(uuid)
        if gpu is None:
            return None
        return {p.pid: p.memory_used or 0 for p in gpu.processes}

    def reading(self, not_before: float = float("-inf")) -> NvmlReading | None:
        """The node's GPUs now (shared for READING_TTL, but taken after the wall-clock time
        `not_before`): the wait list's free GPUs."""
        return self._reading(not_before)

    def monitored_count(self) -> int | None:
        reading = self._reading()
        if reading is None or not reading.up or reading.failed_gpus:
            return None
        return len({p.pid for gpu in reading.gpus for p in gpu.processes})

    def job_processes(self, job: str) -> list[Target] | None:
        reading = self._reading()
        if reading is None or not reading.up or reading.failed_gpus:
            return None
        boot = procfs.boot_id(self.proc_root)
        found = []
        for gpu in reading.gpus:
            for p in gpu.processes:
                ticks = procfs.start_ticks(p.pid, self.proc_root)
                if ticks is not None and slurm_job_of(p.pid, self.proc_root) == job:
                    found.append(Target(self.name, p.pid, ticks, boot, gpu.uuid))
        return found

    # -- signals -------------------------------------------------------------------------

    def alive(self, members: Iterable[Member]) -> list[Member]:
        return self.pidfds.alive(members)

    def wait_exit(self, timeout: float) -> None:
        self.pidfds.wait_exit(timeout)

    def current_tree(self, target: Target, members: Iterable[Member]) -> list[Member]:
        """Recorded members still alive plus the root's current tree; deepest first, root
        last. Only members of the target's uid are ever returned."""
        recorded = list(members)
        root_uid = next((m.uid for m in recorded if m.pid == target.pid), None)
        found: dict[tuple[int, int], Member] = {}
        root = procfs.read_stat(target.pid, self.proc_root)
        status = procfs.read_status(target.pid, self.proc_root)
        if (
            root is not None
            and status is not None
            and root.start_ticks == target.start_ticks
            and not root.is_zombie
            and root_uid in (None, status.uid)
        ):
            root_uid = status.uid
            # The root's descendants as they are now, from the kernel's lists of children
            # (the tree alone, not every process on the host); a whole pass without them.
            table = procfs.read_subtree(root.pid, self.proc_root)
            if table is None:
                table = procfs.read_process_table(self.proc_root)
            table.setdefault(root.pid, root)
            tree = process_tree(root, status.uid, table, self.protection, self.proc_root)
            found = {(m.pid, m.start_ticks): m for m in tree.members}
        for m in recorded:
            if root_uid is not None and m.uid == root_uid:
                found.setdefault((m.pid, m.start_ticks), m)
        descendants = [m for m in found.values() if m.pid != target.pid]
        descendants.reverse()  # deepest descendants were listed last
        return descendants + [m for m in found.values() if m.pid == target.pid]

    def signal_tree(
        self,
        target: Target,
        members: Iterable[Member],
        sig: signal.Signals,
        *,
        dry_run: bool,
        key: str | None = None,
    ) -> list[SignalResult]:
        """Signal every member (children first, root last), each verified before sending:
        same start ticks, same uid as the target, not protected."""
        results = []
        for m in self.current_tree(target, members):
            stat = procfs.read_stat(m.pid, self.proc_root)
            status = procfs.read_status(m.pid, self.proc_root)
            if stat is None or status is None or not self.pidfds.matches(m):
                results.append(SignalResult(m.pid, sig.name, False, "gone or identity changed"))
                continue
            if status.uid != m.uid:
                results.append(
                    SignalResult(m.pid, sig.name, False, f"uid is {status.uid}, not {m.uid}")
                )
                continue
            why = self.protection.reason(stat, status)
            if why is not None:
                results.append(SignalResult(m.pid, sig.name, False, f"protected: {why}"))
                continue
            results.append(self.pidfds.send(m, sig, dry_run=dry_run))
        return results

    def rehearse_many(self, rehearsals: Sequence[Rehearsal]) -> list[list[SignalResult]]:
        return [
            self.signal_tree(r.target, r.members, signal.Signals[r.signal], dry_run=True)
            for r in rehearsals
        ]


def _pod_resources(socket_path: str | None) -> PodResources | None:
    if socket_path is None:
        return None
    from exporter.kube.pod_resources import PodResources

    return PodResources(socket_path)


def local_node(
    settings: NodeConfig,
    protect: Protect,
    sm_window: float,
    projects: ProjectMapping | None = None,
) -> LocalNode:
    """The node this process runs on, reading its evidence where its exporter does.
    `projects`: the node's project mapping, loaded by the caller at start-up."""
    evidence = Evidence(
        heartbeat_dir=Path(settings.heartbeat_dir) if settings.heartbeat_dir else None,
        log_globs=settings.log_globs,
        projects=projects,
        pods=_pod_resources(settings.pod_resources_socket),
        network=settings.network,
        network_floor=settings.network_keepalive_bytes,
        network_window=settings.network_window,
        rendezvous_ports=frozenset(settings.rendezvous_ports),
        utmp=Path(settings.utmp_file) if settings.presence else None,
    )
    return LocalNode(
        settings.name,
        protect,
        sim_dir=settings.sim_dir,
        sm_window=sm_window,
        nvml_timeout=settings.nvml_timeout,
        evidence=evidence,
    )
