"""The scheduler's view of a Slurm job, and its own cancel: `scontrol` and `scancel`.

A job is reclaimed as a whole through Slurm, so the allocation is released and the next
queued job starts; killing a task's PID would leave the allocation held. Every answer is
read from the scheduler, never from an alert label.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z:/_]*)=(\S*)")
_UID = re.compile(r"\((\d+)\)$")
JOB_ID = re.compile(r"[0-9]{1,12}")
# GresUsed=gpu:2(IDX:0-1) or gpu:h100:2(IDX:0-1),gpu:a100:0(IDX:N/A)
_GPUS_USED = re.compile(r"(?:^|,)gpu(?::(?:\(null\)|[^:(,]+))?:([0-9]+)")


class SlurmError(Exception):
    """The scheduler could not be asked (unknown: never a reason to act)."""


class SlurmApi(Protocol):
    """What the actuator asks Slurm: the commands (SlurmCli) or slurmrestd (SlurmRest)."""

    def job(self, job_id: str, *, fresh: bool = False) -> SlurmJob | None: ...

    def cancel(self, job_id: str, *, signal: str | None = None) -> tuple[bool, str]: ...

    def gpus_allocated(self, node: str) -> int | None: ...

    def pending_jobs(self) -> list[PendingJob]: ...

    def free_gpus(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class SlurmJob:
    id: str
    state: str  # RUNNING, CANCELLED, COMPLETED, ...
    uid: int | None
    user: str
    partition: str
    account: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class PendingJob:
    """A job waiting in the queue, as the scheduler has it (`scontrol -o show job`)."""

    id: str
    user: str
    reason: str  # Resources, Priority, ...
    partition: str
    gpus_per_node: int  # 0: the job asks for no GPU
    node_count: int
    nodes: tuple[str, ...]  # where it may run: its required nodes, else its partition's
    submitted: str  # SubmitTime as Slurm prints it (local time, ISO 8601 without a zone)


def gres_counts(gres: str) -> str:
    """`Gres=gpu:h100:4(S:0-1)` as `gpu:h100:4`: the socket affinity is not a count."""
    return re.sub(r"\([^)]*\)", "", gres)


def node_usable(state: str) -> bool:
    """A node whose state (`MIXED+DRAIN`, `IDLE+NOT_RESPONDING`, ...) lets jobs start on it."""
    return not any(s in state.upper() for s in ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING"))


def gpus_per_node(fields: dict[str, str]) -> int:
    """GPUs a job needs on each node: TresPerNode (gres:gpu:2, gres/gpu:h100:2), else
    TresPerJob spread over a one-node job; 0 when it asks for none."""
    for key in ("TresPerNode", "TresPerJob"):
        value = fields.get(key, "").replace("gres/", "").replace("gres:", "")
        found = _GPUS_USED.findall(value)
        if found:
            if key == "TresPerJob" and fields.get("NumNodes", "1").split("-")[0] != "1":
                return 0  # several nodes at once: not a request one node can serve
            return sum(int(n) for n in found)
    return 0


class JobCache:
    """Jobs as last read, for `ttl` seconds (a job's partition, account and nodes do not
    move; its state is read `fresh` where it matters). A cancel forgets its job."""

    def __init__(self, ttl: float, clock: Callable[[], float]) -> None:
        self.ttl, self.clock = ttl, clock
        self._jobs: dict[str, tuple[float, SlurmJob | None]] = {}
        self._lock = threading.Lock()

    def job(
        self, job_id: str, read: Callable[[str], SlurmJob | None], *, fresh: bool = False
    ) -> SlurmJob | None:
        if not JOB_ID.fullmatch(job_id):
            return None
        with self._lock:
            cached = self._jobs.get(job_id)
            if not fresh and cached is not None and self.clock() - cached[0] < self.ttl:
                return cached[1]
        job = read(job_id)
        with self._lock:
            self._jobs[job_id] = (self.clock(), job)
        return job

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)


def partition_nodes(
    partition: str, known: dict[str, tuple[str, ...]], read: Callable[[str], tuple[str, ...]]
) -> tuple[str, ...]:
    """The nodes of a pending job's partitions: one, or several (`-p gpu,gpu-long`, which
    Slurm keeps as `gpu,gpu-long`), each read once per listing, in order, each node once."""
    nodes: dict[str, None] = {}
    for name in partition.split(","):
        if name not in known:
            known[name] = read(name)
        nodes.update(dict.fromkeys(known[name]))
    return tuple(nodes)


def parse_fields(line: str) -> dict[str, str]:
    """`scontrol -o show ...` output: one line of Key=Value pairs."""
    return {m.group(1): m.group(2) for m in _FIELD.finditer(line)}


class SlurmCli:
    def __init__(
        self,
        scontrol: str = "scontrol",
        scancel: str = "scancel",
        *,
        timeout: float = 10.0,
        cache_ttl: float = 5.0,
        env: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scontrol, self.scancel, self.timeout = scontrol, scancel, timeout
        self.env = env
        self._jobs = JobCache(cache_ttl, clock)

    def _run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                list(argv), capture_output=True, text=True, timeout=self.timeout, env=self.env
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{argv[0]}: {exc}") from exc

    def job(self, job_id: str, *, fresh: bool = False) -> SlurmJob | None:
        """The job as the scheduler has it; None when it does not know the id."""
        return self._jobs.job(job_id, self._read_job, fresh=fresh)

    def _read_job(self, job_id: str) -> SlurmJob | None:
        done = self._run([self.scontrol, "-o", "show", "job", job_id])
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                job = None
            else:
                raise SlurmError(f"scontrol show job {job_id}: {done.stderr.strip()[:200]}")
        else:
            fields = parse_fields(done.stdout.strip().splitlines()[0] if done.stdout else "")
            if fields.get("JobId") != job_id:
                raise SlurmError(f"scontrol show job {job_id}: unexpected answer")
            user_field = fields.get("UserId", "")
            uid = _UID.search(user_field)
            job = SlurmJob(
                id=job_id,
                state=fields.get("JobState", ""),
                uid=int(uid.group(1)) if uid else None,
                user=user_field.split("(")[0],
                partition=fields.get("Partition", ""),
                account=fields.get("Account", ""),
                nodes=self.hostnames(fields.get("NodeList", "")),
            )
        return job

    def hostnames(self, node_list: str) -> tuple[str, ...]:
        if not node_list or node_list == "(null)":
            return ()
        if "[" not in node_list:
            return tuple(n for n in node_list.split(",") if n)
        done = self._run([self.scontrol, "show", "hostnames", node_list])
        if done.returncode != 0:
            raise SlurmError(f"scontrol show hostnames: {done.stderr.strip()[:200]}")
        return tuple(done.stdout.split())

    def cancel(self, job_id: str, *, signal: str | None = None) -> tuple[bool, str]:
        """scancel the job (or send it `signal`, e.g. KILL, in all its steps)."""
        if not JOB_ID.fullmatch(job_id):
            return False, "not a job id"
        argv = [self.scancel, *(["--signal", signal, "--full"] if signal else []), job_id]
        done = self._run(argv)
        self._jobs.forget(job_id)
        if done.returncode == 0:
            return True, "scancel accepted"
        return False, f"scancel: {done.stderr.strip()[:200]}"

    def pending_jobs(self) -> list[PendingJob]:
        """Every pending job, with the nodes it may run on (SlurmError: unknown)."""
        done = self._run([self.scontrol, "-o", "show", "job"])
        if done.returncode != 0:
            if "No jobs in the system" in done.stdout + done.stderr:
                return []
            raise SlurmError(f"scontrol show job: {done.stderr.strip()[:200]}")
        partitions: dict[str, tuple[str, ...]] = {}
        jobs = []
        for line in done.stdout.splitlines():
            fields = parse_fields(line)
            if fields.get("JobState") != "PENDING":
                continue
            if not JOB_ID.fullmatch(fields.get("JobId", "")):
                raise SlurmError(f"scontrol show job: unexpected line {line[:80]!r}")
            partition = fields.get("Partition", "")
            required = fields.get("ReqNodeList", "")
            if required and required != "(null)":
                nodes = self.hostnames(required)
            else:
                nodes = partition_nodes(partition, partitions, self._partition_nodes)
            job = PendingJob(
                id=fields["JobId"],
                user=fields.get("UserId", "").split("(")[0],
                reason=fields.get("Reason", ""),
                partition=partition,
                gpus_per_node=gpus_per_node(fields),
                node_count=int(fields.get("NumNodes", "1").split("-")[0] or 1),
                nodes=nodes,
                submitted=fields.get("SubmitTime", ""),
            )
            jobs.append(job)
        return jobs

    def _partition_nodes(self, partition: str) -> tuple[str, ...]:
        done = self._run([self.scontrol, "-o", "show", "partition", partition])
        if done.returncode != 0:
            raise SlurmError(f"scontrol show partition {partition}: {done.stderr.strip()[:200]}")
        return self.hostnames(parse_fields(done.stdout).get("Nodes", ""))

    def free_gpus(self) -> dict[str, int]:
        """GPUs no job holds on each node that can take jobs; a node that cannot (down,
        drained, failing, not responding) is left out (SlurmError: unknown)."""
        done = self._run([self.scontrol, "-o", "-d", "show", "node"])
        if done.returncode != 0:
            raise SlurmError(f"scontrol show node: {done.stderr.strip()[:200]}")
        free = {}
        for line in done.stdout.splitlines():
            fields = parse_fields(line)
            if "NodeName" not in fields:
                continue
            state = fields.get("State", "")
            total = sum(int(n) for n in _GPUS_USED.findall(gres_counts(fields.get("Gres", ""))))
            used = sum(int(n) for n in _GPUS_USED.findall(fields.get("GresUsed", "")))
            if node_usable(state):
                free[fields["NodeName"]] = max(0, total - used)
        return free

    def gpus_allocated(self, node: str) -> int | None:
        """GPUs the scheduler counts as in use on the node (`GresUsed`, by type); None when
        it cannot be read (a count is read, never assumed)."""
        try:
            done = self._run([self.scontrol, "-o", "-d", "show", "node", node])
        except SlurmError:
            return None
        fields = parse_fields(done.stdout.strip().splitlines()[0] if done.stdout.strip() else "")
        if done.returncode != 0 or fields.get("NodeName") != node or "GresUsed" not in fields:
            return None
        return sum(int(n) for n in _GPUS_USED.findall(fields["GresUsed"]))
