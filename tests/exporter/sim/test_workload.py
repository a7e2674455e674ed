"""A simulated workload (exporter/sim/workload.py): a real process that follows its phase
program and publishes what it holds for the simulated NVML, ends cleanly on SIGTERM (or not,
when told to ignore it), and keeps every option when re-exec'd under another name."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from exporter.sim.state import init_node, read_procs
from exporter.sim.workload import add_workload_arguments, spec_from_args, workload_argv
from tests.support import wait_until

GIB = 1 << 30


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_workload_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--util", "40", "--tick", "0.2", "--children", "2", "--child-memory", "1GiB"],
        ["--log", "/tmp/x.log", "--heartbeat", "--heartbeat-dir", "/tmp/beats"],
        ["--ignore-sigterm", "--orphan-children", "--cpu", "--user", "nobody"],
    ],
)
def test_a_re_exec_keeps_every_option(options: list[str]) -> None:
    """`sim run --name` re-execs the workload under that name from `workload_argv`."""
    args = _parse(["--dir", "/n", "--gpu", "1", "--memory", "4GiB", "--phases", "busy=1s,idle"])
    args = _parse(workload_argv(_parse([*workload_argv(args), *options])))
    again = _parse(workload_argv(args))
    assert spec_from_args(again) == spec_from_args(args)
    assert vars(again) == vars(args)


def _start(node: Path, *options: str) -> subprocess.Popen[bytes]:
    argv = ["--dir", str(node), "--gpu", "0", "--memory", "2GiB", "--tick", "0.05", *options]
    return subprocess.Popen(
        [sys.executable, "-m", "exporter.sim.workload", *argv], stdout=subprocess.DEVNULL
    )


def _phases(node: Path) -> dict[int, str]:
    return {p.pid: str(p.extra.get("phase")) for p in read_procs(node)}


@pytest.fixture
def node(tmp_path: Path) -> Path:
    init_node(tmp_path / "node", gpus=1, memory_total=80 * GIB, name="sim")
    return tmp_path / "node"


def test_the_phases_are_followed_and_a_cue_ends_the_wait(node: Path) -> None:
    job = _start(node, "--phases", "busy=0.3s,idle=cue,done")
    try:
        wait_until(lambda: _phases(node).get(job.pid) == "busy", timeout=20)
        (busy,) = read_procs(node)
        assert busy.memory_used == 2 * GIB and busy.sm_util > 0
        wait_until(lambda: _phases(node).get(job.pid) == "idle", timeout=20)
        (idle,) = read_procs(node)
        assert idle.memory_used == 2 * GIB and idle.sm_util == 0
        job.send_signal(signal.SIGUSR1)
        assert job.wait(timeout=20) == 0  # `done`: the job finished
        assert read_procs(node) == []  # and its memory is released
    finally:
        job.kill()


def test_sigterm_ends_the_workload_and_its_workers(node: Path) -> None:
    job = _start(node, "--phases", "idle", "--children", "2")
    try:
        wait_until(lambda: len(read_procs(node)) == 3, timeout=20)
        workers = [c.pid for c in psutil.Process(job.pid).children()]
        assert sorted(workers) == sorted(set(_phases(node)) - {job.pid})
        job.terminate()
        assert job.wait(timeout=20) == 0
        wait_until(lambda: read_procs(node) == [], timeout=20)
        assert not [pid for pid in workers if psutil.pid_exists(pid)]
    finally:
        job.kill()


def test_one_told_to_ignore_sigterm_needs_sigkill(node: Path) -> None:
    job = _start(node, "--phases", "idle", "--ignore-sigterm")
    try:
        wait_until(lambda: job.pid in _phases(node), timeout=20)
        job.terminate()
        with pytest.raises(subprocess.TimeoutExpired):
            job.wait(timeout=1.0)
        assert _phases(node) == {job.pid: "idle"}
    finally:
        job.kill()
        job.wait(timeout=20)


def test_orphaned_workers_outlive_their_parent(node: Path) -> None:
    """A crashed script's DataLoader workers: the parent is killed, the workers hold on."""
    job = _start(node, "--phases", "idle", "--children", "1", "--orphan-children")
    worker = None
    try:
        wait_until(lambda: len(read_procs(node)) == 2, timeout=20)
        (worker,) = [c.pid for c in psutil.Process(job.pid).children()]
        job.kill()
        job.wait(timeout=20)
        assert psutil.pid_exists(worker)

        def reported() -> float:
            return max(p.updated for p in read_procs(node) if p.pid == worker)

        since = reported()
        wait_until(lambda: reported() > since, timeout=20)  # still holding, still reporting
    finally:
        job.kill()
        if worker is not None and psutil.pid_exists(worker):
            psutil.Process(worker).kill()
