"""Demand from Slurm (actuator/demand/slurm_queue.py): the GPU fields of a pending job as
Slurm 22.05+ prints them. The queue itself is read from a real slurmctld in
tests/slurm/test_slurm_demand.py."""

from __future__ import annotations

import pytest

from actuator.schedulers.slurm_cli import gpus_per_node, parse_fields


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
