"""A real single-node Slurm for tests (Debian's slurm-wlm: slurmctld, slurmd, munge), in
a temporary directory: loopback ports, a GPU GRES matching the simulated node,
process tracking by /proc (no cgroups needed), root as SlurmUser (tests run as root)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import free_port, wait_until

MUNGE_SOCKET = Path("/run/munge/munge.socket.2")  # where Slurm's munge plugins look


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        (str(p) for d in ("/usr/sbin", "/usr/bin") if (p := Path(d) / name).exists()), None
    )
    if found is None:
        pytest.fail(f"{name} not found: `make setup` installs Debian's slurm-wlm and munge")
    return found


class JobProcess:
    """A job's process (started by slurmd, not by the test): its pid is all a Workload needs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        return None if Path(f"/proc/{self.pid}").exists() else 0


@dataclass
class Slurm:
    conf: Path
    node: str
    base: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str) -> str:
        done = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=30)
        assert done.returncode == 0, f"{argv}: {done.stderr}"
        return done.stdout

    def sbatch(self, script: str, *options: str) -> str:
        out = self.run(
            _binary("sbatch"),
            "--parsable",
            "-o",
            str(self.base / "job-%j.out"),
            *options,
            "--wrap",
            script,
        )
        return out.strip().split(";")[0]

    def job_state(self, job: str) -> str:
        out = self.run(_binary("scontrol"), "-o", "show", "job", job)
        return out.split("JobState=")[1].split()[0]

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
            for p in sorted(self.base.glob("*.log"))
        )


@contextlib.contextmanager
def _munge(base: Path) -> Iterator[None]:
    """munged on the standard socket, with a key of this run (unless one already answers)."""
    check = subprocess.run("munge -n | unmunge", shell=True, capture_output=True)
    if check.returncode == 0:
        yield
        return
    MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    key = base / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    proc = subprocess.Popen(
        [
            _binary("munged"),
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={MUNGE_SOCKET}",
            f"--pid-file={base / 'munged.pid'}",
            f"--log-file={base / 'munged.log'}",
            f"--seed-file={base / 'munge.seed'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: (
                subprocess.run("munge -n | unmunge", shell=True, capture_output=True).returncode
                == 0
            ),
            15,
        )
        yield
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def slurm_cluster(
    base: Path, gpus: int = 2, node: str = "sim-node", extra: str = ""
) -> Iterator[Slurm]:
    """`node`: the Slurm node name, the same as the exporter's `node` (this host runs it);
    `extra`: more slurm.conf lines."""
    base.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname().split(".")[0]
    for sub in ("state", "spool"):
        (base / sub).mkdir(exist_ok=True)
    conf = base / "slurm.conf"
    conf.write_text(f"""\
ClusterName=reclaimer-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={base / "state"}
SlurmdSpoolDir={base / "spool"}
SlurmctldPidFile={base / "slurmctld.pid"}
SlurmdPidFile={base / "slurmd.pid"}
SlurmctldLogFile={base / "slurmctld.log"}
SlurmdLogFile={base / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MpiDefault=none
KillWait=2
InactiveLimit=0
NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} Gres=gpu:{gpus} \
State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
PartitionName=long Nodes={node} MaxTime=INFINITE State=UP
{extra}""")
    # gres/gpu drops GPUs without a device file: one per simulated GPU, each a character
    # device like /dev/null (major 1, minor 3), that Slurm only counts (task/none binds none).
    devices = base / "dev"
    devices.mkdir(exist_ok=True)
    for i in range(gpus):
        node_file = devices / f"nvidia{i}"
        if not node_file.exists():
            try:
                os.mknod(node_file, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
            except PermissionError:
                pytest.fail("mknod refused (no CAP_MKNOD): Slurm's gres/gpu needs device files")
    (base / "gres.conf").write_text(
        f"NodeName={node} Name=gpu File={devices}/nvidia[0-{gpus - 1}]\n"
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = Slurm(conf, node, base)
    with _munge(base):
        daemons = [
            subprocess.Popen(
                [_binary("slurmctld"), "-D", "-i", "-f", str(conf)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
            subprocess.Popen(
                [_binary("slurmd"), "-D", "-f", str(conf), "-N", node],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
        ]
        try:

            def idle() -> bool:
                for d in daemons:
                    assert d.poll() is None, cluster.logs()
                done = subprocess.run(
                    [_binary("sinfo"), "-h", "-o", "%T"], env=env, capture_output=True, text=True
                )
                return done.returncode == 0 and done.stdout.strip() == "idle"

            wait_until(idle, 60, 0.5)
            yield cluster
        finally:
            subprocess.run(
                [_binary("scancel"), "--full", "-u", "root"], env=env, capture_output=True
            )
            with contextlib.suppress(AssertionError):  # the jobs end (KillWait=2)
                wait_until(lambda: not _squeue(env), 15, 0.5)
            for d in daemons:  # a test cluster: its state need not be saved
                d.kill()
                d.wait(10)
            _kill_step_daemons(str(conf))


def _squeue(env: dict[str, str]) -> str:
    done = subprocess.run([_binary("squeue"), "-h"], env=env, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def _kill_step_daemons(conf: str) -> None:
    """slurmstepd processes this cluster's slurmd started (they carry its SLURM_CONF)."""
    marker = f"SLURM_CONF={conf}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (entry / "comm").read_text().strip() == "slurmstepd" and marker in (
                entry / "environ"
            ).read_bytes().split(b"\0"):
                os.kill(int(entry.name), 9)


@contextlib.contextmanager
def slurmrestd(cluster: Slurm, user: str = "root") -> Iterator[tuple[str, Path]]:
    """slurmrestd on a loopback port with JWT auth (the cluster was started with
    `JWT_CONF`), and a token file for `user`: (url, token file)."""
    done = subprocess.run(
        [_binary("scontrol"), "token", f"username={user}", "lifespan=7200"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0 and "SLURM_JWT=" in done.stdout, done.stderr
    token = cluster.base / "slurm-token"
    token.write_text(done.stdout.strip().split("=", 1)[1] + "\n")
    token.chmod(0o600)
    port = free_port()
    log = (cluster.base / "slurmrestd.log").open("wb")
    # It drops to `nobody` before reading slurm.conf: a world-readable copy, outside the
    # test's private temporary directory.
    public = Path(tempfile.mkdtemp(prefix="slurmrestd-"))
    public.chmod(0o755)
    conf = public / "slurm.conf"
    shutil.copy(cluster.conf, conf)
    conf.chmod(0o644)
    # Only the slurmctld plugin (the slurmdbd one needs a database); never as root.
    proc = subprocess.Popen(
        [
            _binary("slurmrestd"),
            "-f",
            str(conf),
            "-a",
            "rest_auth/jwt",
            "-s",
            "openapi/v0.0.38",
            "-u",
            "nobody",
            f"127.0.0.1:{port}",
        ],
        env={**cluster.env, "SLURM_JWT": "daemon"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            assert proc.poll() is None, (cluster.base / "slurmrestd.log").read_text()[-2000:]
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True

        wait_until(up, 20)
        yield url, token
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        shutil.rmtree(public, ignore_errors=True)


def jwt_conf(base: Path) -> str:
    """slurm.conf lines for JWT auth beside munge (slurmrestd's tokens), key in `base`."""
    base.mkdir(parents=True, exist_ok=True)
    key = base / "jwt.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    return f"AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={key}\n"


def job_command(sim: Path, gpu: int, phases: str) -> str:
    """A batch script's line: one simulated GPU workload on `gpu` of the node `sim`."""
    import sys

    return (
        f"{sys.executable} -m exporter.cli sim run --dir {sim} --gpu {gpu} "
        f"--memory 2GiB --phases {phases} --tick 0.2 > /dev/null 2>&1"
    )


def job_ranks(sim: Path, job: str, count: int) -> list[Any]:
    """The job's workload processes (as tests.actuator.conftest.Workload), once each has
    registered on its simulated GPU and the actuator's shared NVML reading can see it."""
    import time

    from actuator.live import target_of
    from actuator.node import READING_TTL
    from exporter.sim.state import load_node, read_procs
    from exporter.slurm import slurm_job_of
    from tests.helpers.actuator import NODE, Workload

    def found() -> list[int] | None:
        pids = [p.pid for p in read_procs(sim) if slurm_job_of(p.pid) == job]
        return pids if len(pids) == count else None

    pids = wait_until(found, 30)
    # An alert sent the instant a process registers could meet a reading from just before
    # (real alerts come minutes after the exporter saw the process on the GPU).
    time.sleep(READING_TTL)
    uuids = {p.pid: load_node(sim).gpus[p.gpu].uuid for p in read_procs(sim)}
    ranks = []
    for pid in sorted(pids):
        t = target_of(NODE, pid, uuids[pid])
        ranks.append(Workload(JobProcess(pid), t.start_time, t.uuid, t.start_ticks))  # type: ignore[arg-type]
    return ranks
