"""Demand from Slurm (actuator/demand/slurm_queue.py): the GPU fields of a pending job as
Slurm 22.05+ prints them, and the nodes a request may use. The queue itself is read from a
real slurmctld in tests/slurm/test_slurm_demand.py."""

from __future__ import annotations

import pytest

from actuator.demand.slurm_queue import SlurmQueue
from actuator.schedulers.slurm_cli import PendingJob, gpus_per_node, parse_fields


@pytest.mark.parametrize(
    ("line", "gpus"),
    [
        ("JobId=7 JobState=PENDING TresPerNode=gres:gpu:2 NumNodes=1", 2),
        ("JobId=7 JobState=PENDING TresPerNode=gres/gpu:h100:1 NumNodes=1", 1),
        ("JobId=7 JobState=PENDING TresPerJob=gres:gpu:4 NumNodes=1-1", 4),
        ("JobId=7 JobState=PENDING TresPerJob=gres:gpu:4 NumNodes=2", 0),
        ("JobId=7 JobState=PENDING TresPerNode=gres:shard:2 NumNodes=1", 0),
        ("JobId=7 JobState=PENDING NumNodes=1", 0),
    ],
)
def test_gpus_per_node_as_slurm_prints_them(line: str, gpus: int) -> None:
    assert gpus_per_node(parse_fields(line)) == gpus


class Queue:
    """What Slurm answered, as typed values (either transport gives these)."""

    def __init__(self, jobs: list[PendingJob], free: dict[str, int]) -> None:
        self.jobs, self.free = jobs, free

    def pending_jobs(self) -> list[PendingJob]:
        return self.jobs

    def free_gpus(self) -> dict[str, int]:
        return self.free


def _pending(job_id: str, nodes: tuple[str, ...], reason: str = "Resources") -> PendingJob:
    return PendingJob(job_id, "bob", reason, "gpu", 1, 1, nodes, "2026-12-01T09:00:00")


def test_a_request_may_use_only_the_nodes_that_take_jobs_now() -> None:
    """gpu-02 drains (free_gpus leaves it out): an idle job there is never reclaimed for a
    job that cannot start there, and a job that may run only there asks for nothing (no
    nodes would read as any node)."""
    jobs = [
        _pending("43", ("gpu-01", "gpu-02")),
        _pending("44", ("gpu-02",)),
        _pending("45", ()),  # a partition without nodes
        _pending("46", ("gpu-01",), reason="Nodes_required_for_job_are_DOWN,_DRAINED"),
    ]
    reading = SlurmQueue(Queue(jobs, {"gpu-01": 0})).read()
    assert [(r.key, r.nodes) for r in reading.requests] == [("43", ("gpu-01",))]
    assert reading.free == {"gpu-01": 0}
