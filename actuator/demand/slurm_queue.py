"""Demand from Slurm: pending jobs that wait for GPUs (reason Resources or Priority), each
a request for its GPUs per node on the nodes it may run on that can take jobs now, read
with `scontrol` or through slurmrestd."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Protocol

from actuator.demand.model import Claimant, DemandError, Reading, Request
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
        # Only nodes that can take jobs serve a request: an idle job on a drained node is
        # never reclaimed for a job that cannot start there. A job none of whose nodes can
        # take it now asks for nothing (no nodes would mean any node).
        requests = [self._request(job, tuple(n for n in job.nodes if n in free)) for job in jobs]
        return Reading(tuple(r for r in requests if r.nodes), free)

    @staticmethod
    def _waits_for_gpus(job: PendingJob) -> bool:
        return job.gpus_per_node > 0 and job.node_count == 1 and job.reason in WAITING_FOR_RESOURCES

    def _request(self, job: PendingJob, nodes: tuple[str, ...]) -> Request:
        return Request(
            source=self.name,
            key=job.id,
            who=f"Slurm job {job.id} of {job.user}",
            gpus=job.gpus_per_node,
            nodes=nodes,
            since=submitted_at(job.submitted),
            claimant=Claimant(slurm_job=job.id),
        )
