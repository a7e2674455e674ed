"""Slurm jobs on a real single-node Slurm (slurmctld, slurmd, munge): a job whose GPU
processes are all idle is cancelled through Slurm and its GPUs return to the scheduler; a
job with one busy process is kept. The actuator is the real one (gunicorn), its node the
simulated one the jobs' workloads use."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from actuator.schedulers.slurm_cli import SlurmCli
from exporter.sim.state import init_node, load_node
from tests.helpers.actuator import NODE, Actuator, Workload, alert_for, payload
from tests.helpers.slurm import Slurm, job_command, job_ranks, slurm_cluster
from tests.support import wait_until

pytestmark = pytest.mark.timeout(150)


@dataclass
class Site:
    slurm: Slurm
    sim: Path
    actuator: Actuator


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("slurm")
    sim = base / "node"
    init_node(sim, gpus=4, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    with slurm_cluster(base / "cluster", gpus=4, node=NODE) as slurm:
        policy = {
            "slurm": {"conf": str(slurm.conf)},
            # Jobs of the `long` partition are only warned about (the partition is the
            # scheduler's word, read by scontrol, never an alert label).
            "projects": [
                {"name": "long-jobs", "match": {"partitions": ["long"]}, "mode": "notify"}
            ],
        }
        actuator = Actuator(base / "actuator", sim, policy).start()
        try:
            yield Site(slurm, sim, actuator)
        finally:
            actuator.stop()


def _ranks(site: Site, job: str, count: int) -> list[Workload]:
    return job_ranks(site.sim, job, count)


def _workload(site: Site, gpu: int, phases: str) -> str:
    return job_command(site.sim, gpu, phases)


def test_a_job_whose_ranks_are_all_idle_is_cancelled_through_slurm(site: Site) -> None:
    job = site.slurm.sbatch(
        f"{_workload(site, 0, 'idle')} & {_workload(site, 1, 'idle')} & wait", "--gres=gpu:2"
    )
    ranks = _ranks(site, job, 2)
    assert SlurmCli(env=site.slurm.env).gpus_allocated(site.slurm.node) == 2
    for r in ranks:
        assert site.actuator.post(payload(alert_for(r))).status_code == 200
    cases = [
        site.actuator.wait_state(r, "reclaimed", "cancelled", "refused", "failed", timeout=60)
        for r in ranks
    ]
    reclaimed = [c for c in cases if c["state"] == "reclaimed"]
    assert reclaimed, cases
    assert [s["signal"] for s in reclaimed[0]["signals"]] == ["SCANCEL"]  # no PID signalled
    wait_until(lambda: site.slurm.job_state(job) == "CANCELLED", 30)
    wait_until(lambda: SlurmCli(env=site.slurm.env).gpus_allocated(site.slurm.node) == 0, 30)
    for r in ranks:
        wait_until(lambda r=r: r.proc.poll() is not None, 30)
    (verified,) = [a for a in site.actuator.records("slurm_verified") if a["job"] == job]
    assert verified["state"] == "CANCELLED" and verified["gpus_allocated"] == {NODE: 0}
    (cancel,) = [a for a in site.actuator.audit("slurm_cancel") if a["job"] == job]
    assert cancel["ok"] and cancel["signal"] is None


def test_a_job_with_one_busy_rank_is_kept(site: Site) -> None:
    job = site.slurm.sbatch(
        f"{_workload(site, 2, 'idle')} & {_workload(site, 3, 'busy')} & wait", "--gres=gpu:2"
    )
    idle, busy = _ranks(site, job, 2)
    if load_node(site.sim).gpus[2].uuid != idle.uuid:
        idle, busy = busy, idle
    assert site.actuator.post(payload(alert_for(idle))).status_code == 200
    case = site.actuator.wait_state(
        idle, "deferred", "reclaimed", "refused", "cancelled", timeout=60
    )
    assert case["state"] == "deferred" and case["reason_code"] == "slurm_job_busy", case
    assert f"rank pid {busy.pid}" in case["reason"]
    assert site.slurm.job_state(job) == "RUNNING"
    assert idle.proc.poll() is None and busy.proc.poll() is None
    assert case["signals"] == []


@pytest.mark.reliability(8)
def test_a_rule_for_the_jobs_partition_applies(site: Site) -> None:
    job = site.slurm.sbatch(f"{_workload(site, 0, 'idle')} & wait", "--gres=gpu:1", "-p", "long")
    (rank,) = _ranks(site, job, 1)
    # The alert claims another partition's project: claims select nothing.
    assert site.actuator.post(payload(alert_for(rank, project="debug"))).status_code == 200
    case = site.actuator.wait_state(
        rank, "observed", "reclaimed", "refused", "cancelled", timeout=60
    )
    assert case["state"] == "observed" and case["rule"] == "projects #1 (long-jobs)", case
    assert site.slurm.job_state(job) == "RUNNING" and case["signals"] == []
    SlurmCli(env=site.slurm.env).cancel(job)
