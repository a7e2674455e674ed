"""The Slurm job a process belongs to, proven, not claimed.

From its cgroup path first (both cgroup layouts; only root and slurmd place processes in a
job's cgroup), else from its environment (`SLURM_JOB_ID`), which the process could have set
itself: the environment counts only when the process descends from a root-owned
`slurmstepd` (the step daemon that starts every task). A process that names a job it is not
a task of is attributed to no job.
"""

from __future__ import annotations

import re
from pathlib import Path

from exporter import procfs
from exporter.cgroup import read_cgroup_identity

_JOB_ID = re.compile(rb"(?:^|\0)SLURM_JOB_ID=([0-9]{1,12})(?:\0|$)")
MAX_DEPTH = 64  # ancestors walked up to slurmstepd


def environ_job(pid: int, proc_root: Path = procfs.PROC) -> str:
    raw = procfs.read_proc_bytes(f"{proc_root}/{pid}/environ")
    if raw is None:
        return ""
    match = _JOB_ID.search(raw)
    return match.group(1).decode() if match else ""


def under_slurmstepd(pid: int, proc_root: Path = procfs.PROC) -> bool:
    """An ancestor is `slurmstepd`, running as root."""
    seen = 0
    stat = procfs.read_stat(pid, proc_root)
    while stat is not None and stat.ppid > 1 and seen < MAX_DEPTH:
        parent = procfs.read_stat(stat.ppid, proc_root)
        if parent is None:
            return False
        if procfs.read_comm(parent.pid, proc_root) == "slurmstepd":
            status = procfs.read_status(parent.pid, proc_root)
            return status is not None and status.uid == 0
        stat, seen = parent, seen + 1
    return False


def slurm_job_of(pid: int, proc_root: Path = procfs.PROC, cgroup_job: str | None = None) -> str:
    """The job id, or "" when the process is not provably a task of one."""
    job = read_cgroup_identity(pid, proc_root).slurm_job if cgroup_job is None else cgroup_job
    if job:
        return job
    claimed = environ_job(pid, proc_root)
    return claimed if claimed and under_slurmstepd(pid, proc_root) else ""
