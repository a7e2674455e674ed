"""Slurm through slurmrestd (JWT) instead of the commands: a real slurmrestd 22.05 in front
of a real single-node Slurm; the actuator cancels an idle job through it."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from actuator.live import target_of
from actuator.node import READING_TTL
from actuator.schedulers.slurm_cli import SlurmCli, SlurmError
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


def test_the_queue_through_slurmrestd_reads_as_through_scontrol(site: RestSite) -> None:
    """What demand reads (pending jobs, free GPUs per node) is the same through both of
    Slurm's transports, on one real cluster: GPUs taken, jobs pending for each reason and
    shape (two partitions at once included), then the node drained."""
    cli = SlurmCli(env=site.slurm.env)
    jobs = [
        site.slurm.sbatch("sleep 300", "--gres=gpu:1"),  # runs
        site.slurm.sbatch("sleep 300", "--gres=gpu:2"),  # needs the whole node: Resources
        site.slurm.sbatch("sleep 300", "--gpus=1", "-p", "long"),  # TresPerJob, another partition
        site.slurm.sbatch("sleep 300", "--gres=gpu:1", "-w", NODE),  # required node
        site.slurm.sbatch("sleep 300", "-p", "long"),  # no GPU
        site.slurm.sbatch("sleep 300", "--gres=gpu:1", "--hold"),  # held: not for a reclaim
        site.slurm.sbatch("sleep 300", "--gres=gpu:1", "-p", "debug,long"),  # either partition
    ]
    try:
        wait_until(lambda: site.slurm.job_state(jobs[0]) == "RUNNING", 30, 0.3)
        wait_until(lambda: len(cli.pending_jobs()) == 6, 30, 0.3)
        through_rest, through_cli = site.rest.pending_jobs(), cli.pending_jobs()
        assert sorted(through_rest, key=lambda j: j.id) == sorted(through_cli, key=lambda j: j.id)
        by_id = {j.id: j for j in through_rest}
        assert by_id[jobs[1]].gpus_per_node == 2 and by_id[jobs[1]].nodes == (NODE,)
        assert by_id[jobs[2]].gpus_per_node == 1 and by_id[jobs[2]].partition == "long"
        assert by_id[jobs[4]].gpus_per_node == 0
        assert by_id[jobs[5]].reason not in ("Resources", "Priority")
        # Two partitions on one node: each read, the node once (one such job made the whole
        # queue unknown, for every job, before).
        assert by_id[jobs[6]].partition == "debug,long" and by_id[jobs[6]].nodes == (NODE,)
        assert by_id[jobs[1]].submitted  # the same local time scontrol prints
        assert site.rest.free_gpus() == cli.free_gpus()
        site.slurm.run("scontrol", "update", f"nodename={NODE}", "state=drain", "reason=test")
        wait_until(lambda: cli.free_gpus() == {}, 30, 0.3)
        # A drained node takes no job, whatever it has free.
        site.slurm.run("scancel", jobs[0])
        wait_until(lambda: site.rest.gpus_allocated(NODE) == 0, 30, 0.3)
        assert site.rest.free_gpus() == cli.free_gpus() == {}
    finally:
        site.slurm.run("scancel", *jobs)
        site.slurm.run("scontrol", "update", f"nodename={NODE}", "state=undrain")
    wait_until(lambda: site.rest.free_gpus() == {NODE: 2}, 30, 0.3)
    assert site.rest.pending_jobs() == []


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b'{"jobs": ["a job"], "nodes": [7]}', "not a list of objects"),
        (b'{"jobs": {"job_id": 1}, "nodes": "sim-node"}', "not a list of objects"),
        (
            b'{"jobs": [{"job_id": 7, "job_state": "PENDING", "node_count": "1"}],'
            b' "nodes": [{"gres": "gpu:2"}]}',
            "not a whole number|without a name",
        ),
        (
            b'{"jobs": [{"job_id": "7; rm", "job_state": "PENDING", "node_count": 1}],'
            b' "nodes": [{"name": "n", "gres": "gpu:2"}], "errors": ["down"]}',
            "id is|down",
        ),
        (b'[{"jobs": []}]', "no jobs|no nodes"),
        (b'{"errors": "not a list"}', "errors: 'not a list'"),
        (b"\xff\xfe not JSON", "no jobs|no nodes"),
    ],
)
@pytest.mark.reliability(51)
def test_a_slurmrestd_answer_of_the_wrong_shape_is_unknown_never_no_demand(
    tmp_path: Path, body: bytes, what: str
) -> None:
    """A slurmrestd (or a proxy in front of it) that answers nonsense: each read is a
    SlurmError (demand unknown, the job unknown), never "no job" nor a crash."""
    token = tmp_path / "token"
    token.write_text("t\n")
    with answering(body) as url:
        rest = SlurmRest(url, "root", str(token), timeout=5)
        with pytest.raises(SlurmError, match=what):
            rest.pending_jobs()
        with pytest.raises(SlurmError, match=what):
            rest.free_gpus()
        if b'"job_id": 7,' not in body:  # the one answer that names job 7 as Slurm would
            with pytest.raises(SlurmError):
                rest.job("7")
        assert rest.gpus_allocated("n") is None
        assert rest.cancel("7")[0] is False


def test_slurmrestd_answers_are_bounded_and_not_followed(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t\n")
    redirect = answering(b'{"jobs": []}', status=307, location="http://127.0.0.1:9/x")
    with redirect as url, pytest.raises(SlurmError, match="HTTP 307"):
        SlurmRest(url, "root", str(token), timeout=5).pending_jobs()
    # The shipped bound is 256 MiB; a smaller one shows what happens past it.
    with (
        answering(b'{"jobs": [' + b"{}, " * 30_000) as url,
        pytest.raises(SlurmError, match="an answer over 65536 bytes"),
    ):
        SlurmRest(url, "root", str(token), timeout=5, max_answer=65536).pending_jobs()


@contextlib.contextmanager
def answering(body: bytes, status: int = 200, location: str = "") -> Iterator[str]:
    """A stand-in for a broken slurmrestd on loopback: every request gets `body`."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        do_GET = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
