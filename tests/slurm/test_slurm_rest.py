"""Slurm through slurmrestd (JWT) instead of the commands: a real slurmrestd 22.05 in front
of a real single-node Slurm; the actuator cancels an idle job through it."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from actuator.live import target_of
from actuator.node import READING_TTL
from actuator.schedulers.slurm_cli import SlurmError
from actuator.schedulers.slurm_rest import SlurmRest
from exporter.sim.state import init_node, load_node, read_procs
from exporter.slurm import slurm_job_of
from tests.helpers.actuator import NODE, Actuator, Workload, alert_for, payload
from tests.helpers.slurm import JobProcess, Slurm, jwt_conf, slurm_cluster, slurmrestd
from tests.support import wait_until

pytestmark = pytest.mark.timeout(150)


@dataclass
class RestSite:
    slurm: Slurm
    sim: Path
    rest: SlurmRest
    actuator: Actuator


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestSite]:
    base = tmp_path_factory.mktemp("slurm-rest")
    sim = base / "node"
    init_node(sim, gpus=2, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    extra = jwt_conf(base / "jwt")
    with (
        slurm_cluster(base / "cluster", gpus=2, node=NODE, extra=extra) as slurm,
        slurmrestd(slurm) as (url, token),
    ):
        rest = {"url": url, "user": "root", "token_file": str(token)}
        actuator = Actuator(base / "actuator", sim, {"slurm": {"rest": rest}}).start()
        try:
            yield RestSite(slurm, sim, SlurmRest(url, "root", str(token)), actuator)
        finally:
            actuator.stop()


def test_an_idle_job_is_cancelled_through_slurmrestd(site: RestSite) -> None:
    run = (
        f"{sys.executable} -m exporter.cli sim run --dir {site.sim} --gpu 0 --memory 2GiB "
        "--phases idle --tick 0.2 > /dev/null 2>&1"
    )
    # `scontrol` is not used: the actuator has no slurm.conf, only slurmrestd's URL.
    job = site.slurm.sbatch(f"{run} & wait", "--gres=gpu:1")
    pid = wait_until(
        lambda: next((p.pid for p in read_procs(site.sim) if slurm_job_of(p.pid) == job), None), 30
    )
    time.sleep(READING_TTL)  # see tests/slurm/test_slurm_jobs.py
    t = target_of(NODE, pid, load_node(site.sim).gpus[0].uuid)
    w = Workload(JobProcess(pid), t.start_time, t.uuid, t.start_ticks)  # type: ignore[arg-type]
    seen = site.rest.job(job)
    assert seen is not None and (seen.state, seen.uid, seen.nodes) == ("RUNNING", 0, (NODE,))
    assert site.rest.gpus_allocated(NODE) == 1
    assert site.actuator.post(payload(alert_for(w))).status_code == 200
    case = site.actuator.wait_state(w, "reclaimed", "refused", "cancelled", "failed", timeout=60)
    assert case["state"] == "reclaimed", case
    assert [s["signal"] for s in case["signals"]] == ["SCANCEL"]
    wait_until(lambda: site.slurm.job_state(job) == "CANCELLED", 30)
    (verified,) = site.actuator.records("slurm_verified")
    assert verified["state"] == "CANCELLED" and verified["gpus_allocated"] == {NODE: 0}


def test_the_rest_client_tells_unknown_from_unreachable(site: RestSite, tmp_path: Path) -> None:
    assert site.rest.job("999999") is None  # Slurm answers: no such job
    assert site.rest.job("not-a-job") is None
    assert site.rest.hostnames("gpu[01-03],dgx-1") == ("gpu01", "gpu02", "gpu03", "dgx-1")
    lost = SlurmRest(site.rest.base.split("/slurm/")[0], "root", str(tmp_path / "no-token"))
    with pytest.raises(SlurmError, match="token"):
        lost.job("1")
    forged = tmp_path / "forged"
    forged.write_text("eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl\n")
    with pytest.raises(SlurmError):
        SlurmRest(site.rest.base.split("/slurm/")[0], "root", str(forged)).job("1")
    away = SlurmRest("http://127.0.0.1:9", "root", str(forged), timeout=1)
    with pytest.raises(SlurmError, match="slurmrestd"):
        away.job("1")
