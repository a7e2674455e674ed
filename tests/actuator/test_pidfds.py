"""Signals through pidfds (actuator/pidfds.py), on real processes: a verified pidfd is bound
to its process, a recorded identity that does not match is never signalled, a stopped
process gets SIGCONT after SIGTERM, and a dry run sends nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from actuator.models import Member
from actuator.pidfds import Pidfds
from exporter import procfs
from tests.support import wait_until

SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"]


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(SLEEPER)
    wait_until(lambda: procfs.read_stat(proc.pid) is not None, 10)
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def _member(proc: subprocess.Popen[bytes], ticks_off: int = 0) -> Member:
    stat = procfs.read_stat(proc.pid)
    assert stat is not None
    return Member(proc.pid, stat.start_ticks + ticks_off, 0)


def test_a_verified_process_is_signalled_and_seen_exiting(child) -> None:
    pidfds, me = Pidfds(), _member(child)
    assert pidfds.alive([me]) == [me]
    result = pidfds.send(me, signal.SIGTERM, dry_run=False)
    assert result.sent and result.signal == "SIGTERM"
    assert child.wait(timeout=10) == -signal.SIGTERM
    assert pidfds.alive([me]) == []


def test_another_identity_under_the_same_pid_is_never_signalled(child) -> None:
    pidfds = Pidfds()
    stranger = _member(child, ticks_off=1)  # as if the PID had been reused since
    result = pidfds.send(stranger, signal.SIGKILL, dry_run=False)
    assert not result.sent and "identity" in result.detail
    time.sleep(0.2)
    assert child.poll() is None  # untouched
    assert pidfds.alive([stranger]) == []


def test_a_stopped_process_gets_to_handle_sigterm(child) -> None:
    child.send_signal(signal.SIGSTOP)

    def state() -> str:  # field 3 of /proc/PID/stat, after the command name's ')'
        return (procfs.PROC / str(child.pid) / "stat").read_text().rsplit(") ", 1)[1][0]

    wait_until(lambda: state() == "T", 10)
    assert Pidfds().send(_member(child), signal.SIGTERM, dry_run=False).sent
    assert child.wait(timeout=10) == -signal.SIGTERM  # SIGCONT followed


def test_a_dry_run_sends_nothing(child) -> None:
    result = Pidfds().send(_member(child), signal.SIGKILL, dry_run=True)
    assert not result.sent and result.detail == "dry run"
    time.sleep(0.2)
    assert child.poll() is None
