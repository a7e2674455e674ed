"""Demand from Slurm: pending jobs that wait for GPUs (reason Resources or Priority), each
a request for its GPUs per node on the nodes it may run on, read with `scontrol`."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Protocol

from actuator.demand.model import DemandError, Reading, Request
from actuator.schedulers.slurm_cli import PendingJob, SlurmError

# Why a job waits when more GPUs would start it; other reasons (a hold, a dependency, a
# limit) are not helped by a reclaim.
WAITING_FOR_RESOURCES = frozenset({"Resources", "Priority"})


class PendingJobs(Protocol):
    def pending_jobs(self) -> list[PendingJob]: ...

    def free_gpus(self) -> dict[str, int]: ...


def submitted_at(text: str) -> float | None:
    """Slurm's SubmitTime (local time, no zone) in unix seconds; None when unreadable."""
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(text).timestamp()
    return None


class SlurmQueue:
    name = "slurm"

    def __init__(self, slurm: PendingJobs) -> None:
        self.slurm = slurm

    def read(self) -> Reading:
        try:
            jobs = [job for job in self.slurm.pending_jobs() if self._waits_for_gpus(job)]
            free = self.slurm.free_gpus() if jobs else {}
        except SlurmError as exc:
            raise DemandError(str(exc)) from None
        return Reading(tuple(self._request(job) for job in jobs), free)

    @staticmethod
    def _waits_for_gpus(job: PendingJob) -> bool:
        return job.gpus_per_node > 0 and job.node_count == 1 and job.reason in WAITING_FOR_RESOURCES

    def _request(self, job: PendingJob) -> Request:
        return Request(
            source=self.name,
            key=job.id,
            who=f"Slurm job {job.id} of {job.user}",
            gpus=job.gpus_per_node,
            nodes=job.nodes,
            since=submitted_at(job.submitted),
        )
