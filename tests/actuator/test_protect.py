"""Who is never signalled, judged on real processes: PID 1 and kernel threads, this
process and its ancestors (by PID and start time, never by name), root and system uids,
protected users, and protected commands matched against the real command names."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from actuator.policy import Protect
from actuator.protect import Protection, command_names
from exporter import procfs
from tests.support import wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs processes as other uids (root)")
NOBODY = 65534


def _reason(protection: Protection, pid: int) -> str | None:
    stat, status = procfs.read_stat(pid), procfs.read_status(pid)
    assert stat is not None and status is not None
    return protection.reason(stat, status)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A plain job of an ordinary user (uid 65534), named `sleep`."""
    proc = subprocess.Popen(["sleep", "60"], user=NOBODY, group=NOBODY)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_an_ordinary_users_job_is_not_protected(sleeper: subprocess.Popen[bytes]) -> None:
    assert _reason(Protection(Protect()), sleeper.pid) is None


def test_pid_1_kernel_threads_and_this_process_with_its_ancestors_are() -> None:
    protection = Protection(Protect(protect_root=False, protected_uid_below=0))
    assert _reason(protection, 1) == "pid 1"
    assert _reason(protection, 2) == "kernel thread"  # kthreadd
    assert _reason(protection, os.getpid()) == "a gpu-reclaimer process or its ancestor"
    assert _reason(protection, os.getppid()) == "a gpu-reclaimer process or its ancestor"


def test_root_system_uids_and_protected_users_are(sleeper: subprocess.Popen[bytes]) -> None:
    root_job = subprocess.Popen(["sleep", "60"])
    try:
        assert _reason(Protection(Protect()), root_job.pid) == "root"
    finally:
        root_job.kill()
        root_job.wait()
    below = Protection(Protect(protected_uid_below=NOBODY + 1))
    assert _reason(below, sleeper.pid) == f"uid {NOBODY} < {NOBODY + 1}"
    by_name = Protection(Protect(users=("nobody",)))
    assert _reason(by_name, sleeper.pid) == "protected user nobody"


def test_a_protected_command_matches_its_real_names_not_an_argument(tmp_path: Path) -> None:
    script = tmp_path / "tensorboard"
    script.write_text("import time\ntime.sleep(60)\n")
    script.chmod(0o755)
    # As root, with root and system uids open: only the command can protect them here.
    open_uids = {"protect_root": False, "protected_uid_below": 0}
    served = subprocess.Popen([sys.executable, str(script)])
    # A job that only mentions the name in an argument stays a job.
    mention = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "tensorboard"])
    try:
        protection = Protection(Protect(**open_uids))
        # Read once the child has exec'd its script (until then /proc shows the interpreter).
        assert wait_until(lambda: "tensorboard" in command_names(served.pid), 10)
        reason = _reason(protection, served.pid)
        assert reason is not None and reason.startswith("protected command 'tensorboard'")
        assert _reason(protection, mention.pid) is None
        extra = Protection(Protect(extra_commands=("sleep",), **open_uids))
        sleeping = subprocess.Popen(["sleep", "60"])
        try:
            assert _reason(extra, sleeping.pid) == "protected command 'sleep' (pattern 'sleep')"
        finally:
            sleeping.kill()
            sleeping.wait()
    finally:
        for proc in (served, mention):
            proc.kill()
            proc.wait()
