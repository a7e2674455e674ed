"""reclaim_when: demand on a real single-node Slurm (slurmctld, slurmd, munge), its queue
read through the commands (`scontrol`) and, again, through a real slurmrestd: an idle job
is warned and kept while nobody waits; a pending job that needs two GPUs, while the node's
other GPU is busy, reclaims nothing (no fit); a pending job that needs one GPU has the idle
job cancelled through Slurm after the grace, and Slurm starts it on the freed GPU, where the
actuator sees it as the GPU's next holder; a two-GPU job beside a free GPU takes it and one
reclaimed idle job."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from actuator.schedulers.slurm_cli import SlurmCli
from exporter.sim.state import init_node
from exporter.slurm import slurm_job_of
from tests.helpers.actuator import NODE, Actuator, Workload, alert_for, payload
from tests.helpers.slurm import Slurm, job_command, job_ranks, jwt_conf, slurm_cluster, slurmrestd
from tests.support import wait_until

pytestmark = pytest.mark.timeout(150)


@dataclass
class Site:
    slurm: Slurm
    sim: Path
    actuator: Actuator
    idle_job: str = ""
    busy_job: str = ""
    idle: Workload | None = None

    def audit(self) -> list[dict]:
        return [json.loads(line) for line in (self.actuator.workdir / "audit.jsonl").open()]

    def squeue(self, job: str, field: str) -> str:
        return self.slurm.run("squeue", "-h", "-j", job, "-o", field).strip()


def _workload(site: Site, gpu: int, phases: str) -> str:
    return job_command(site.sim, gpu, phases)


def _rank(site: Site, job: str) -> Workload:
    (rank,) = job_ranks(site.sim, job, 1)
    return rank


@pytest.fixture(scope="module", params=["scontrol", "slurmrestd"])
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    """Both GPUs allocated: an idle job on GPU 0 (alerted, warned), a busy one on GPU 1."""
    base = tmp_path_factory.mktemp("slurm-demand")
    sim = base / "node"
    init_node(sim, gpus=2, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    rest = request.param == "slurmrestd"
    extra = jwt_conf(base / "jwt") if rest else ""
    with contextlib.ExitStack() as stack:
        slurm = stack.enter_context(slurm_cluster(base / "cluster", gpus=2, node=NODE, extra=extra))
        if rest:  # the actuator has no slurm.conf, only slurmrestd's URL
            url, token = stack.enter_context(slurmrestd(slurm))
            transport: dict = {"rest": {"url": url, "user": "root", "token_file": str(token)}}
        else:
            transport = {"conf": str(slurm.conf)}
        policy = {
            "slurm": transport,
            "defaults": {"reclaim_when": "demand", "grace": "1s"},
            "demand": {"slurm": True, "interval": "0.3s"},
        }
        actuator = Actuator(base / "actuator", sim, policy).start()
        try:
            s = Site(slurm, sim, actuator)
            s.idle_job = slurm.sbatch(_workload(s, 0, "idle"), "--gres=gpu:1")
            s.busy_job = busy_job = slurm.sbatch(_workload(s, 1, "busy"), "--gres=gpu:1")
            s.idle = _rank(s, s.idle_job)
            _rank(s, busy_job)
            assert actuator.post(payload(alert_for(s.idle))).status_code == 200
            yield s
        finally:
            actuator.stop()


def _read_with(site: Site, waiting: int) -> None:
    """Until the actuator has read the queue with `waiting` requests, and acted on it for
    a few passes more (reconciler every 0.1 s, the queue every 0.3 s)."""
    wait_until(
        lambda: site.actuator.metric("gpu_reclaimer_demand_waiting", source="slurm") == waiting,
        30,
        0.2,
    )
    time.sleep(1.5)


def test_an_idle_job_is_warned_and_kept_while_nobody_waits(site: Site) -> None:
    assert site.idle is not None
    case = site.actuator.wait_state(site.idle, "notified", "reclaimed", "refused", timeout=60)
    _read_with(site, 0)
    case = site.actuator.case_for(site.idle)
    assert case is not None and case["state"] == "notified" and case["signals"] == []
    assert case["demand"] is None
    assert site.actuator.metric("gpu_reclaimer_demand_source_up", source="slurm") == 1
    assert site.slurm.job_state(site.idle_job) == "RUNNING"


@pytest.mark.reliability(53)
def test_a_two_gpu_job_that_no_idle_gpu_can_serve_reclaims_nothing(site: Site) -> None:
    assert site.idle is not None
    big = site.slurm.sbatch("sleep 300", "--gres=gpu:2")
    try:
        wait_until(lambda: site.squeue(big, "%r") in ("Resources", "Priority"), 30, 0.3)
        _read_with(site, 1)
        case = site.actuator.case_for(site.idle)
        assert case is not None and case["state"] == "notified" and case["demand"] is None
        assert site.slurm.job_state(site.idle_job) == "RUNNING"
        assert not [a for a in site.audit() if a.get("code") == "demand"]
    finally:
        site.slurm.run("scancel", big)
    _read_with(site, 0)


@pytest.mark.reliability(60)
def test_a_waiting_one_gpu_job_gets_the_idle_jobs_gpu(site: Site) -> None:
    assert site.idle is not None
    # It runs on the GPU the idle job frees (the simulated node's GPU 0).
    waiting = site.slurm.sbatch(_workload(site, 0, "busy"), "--gres=gpu:1")
    try:
        wait_until(lambda: site.squeue(waiting, "%r") in ("Resources", "Priority"), 30, 0.3)
        case = site.actuator.wait_state(site.idle, "reclaimed", "failed", "cancelled", timeout=60)
        assert case["state"] == "reclaimed", case
        assert [s["signal"] for s in case["signals"]] == ["SCANCEL"]
        assert case["demand"]["for"] == f"slurm:{waiting}"
        wait_until(lambda: site.slurm.job_state(waiting) == "RUNNING", 30, 0.3)
        audit = site.audit()
        (chosen,) = [a for a in audit if a.get("code") == "demand" and a["action"] == "notify"]
        assert chosen["reason"].startswith(f"chosen for Slurm job {waiting} of root waiting ")
        # Recorded once the reclaim is verified with Slurm, just after the case's new state.
        wait_until(lambda: [a for a in site.audit() if a["event"] == "handed_off"], 30, 0.1)
        (handed,) = [a for a in site.audit() if a["event"] == "handed_off"]
        assert handed["request"] == f"slurm:{waiting}" and handed["case"] == case["id"]
        # The actuator saw the hand-off itself: the waiting job's process is the GPU's next holder.
        wait_until(lambda: [a for a in site.audit() if a["event"] == "gpu_taken"], 30, 0.3)
        (taken,) = [a for a in site.audit() if a["event"] == "gpu_taken"]
        assert taken["request"] == f"slurm:{waiting}" and taken["holders"]
        assert slurm_job_of(taken["holders"][0]) == waiting
        assert site.actuator.metric("gpu_reclaimer_reclaims_total", trigger="demand") == 1
        assert site.actuator.metric("gpu_reclaimer_demand_to_free_seconds_count") == 1
    finally:  # a failure here must not leave the job queued for the next test
        site.slurm.run("scancel", waiting)


@pytest.mark.reliability(53)
def test_a_free_gpu_beside_an_idle_one_serves_a_two_gpu_job(site: Site) -> None:
    """Slurm counts one GPU free and one held by an idle job: a job that needs two waits,
    and only the idle job is reclaimed for it (the free one is counted, not doubled)."""
    cli = SlurmCli(env=site.slurm.env)
    wait_until(lambda: cli.gpus_allocated(site.slurm.node) == 1, 30, 0.3)  # the busy job
    idle_job = site.slurm.sbatch(_workload(site, 0, "idle"), "--gres=gpu:1")
    idle = _rank(site, idle_job)
    assert site.actuator.post(payload(alert_for(idle))).status_code == 200
    site.actuator.wait_state(idle, "notified", timeout=60)
    site.slurm.run("scancel", site.busy_job)
    wait_until(lambda: cli.free_gpus() == {site.slurm.node: 1}, 30, 0.3)
    pair = site.slurm.sbatch("sleep 300", "--gres=gpu:2")
    case = site.actuator.wait_state(idle, "reclaimed", "failed", "cancelled", timeout=60)
    assert case["state"] == "reclaimed" and case["demand"]["for"] == f"slurm:{pair}", case
    wait_until(lambda: site.slurm.job_state(pair) == "RUNNING", 30, 0.3)
    site.slurm.run("scancel", pair)
