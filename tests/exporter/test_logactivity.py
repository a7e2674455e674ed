"""Log write timestamps of real processes (exporter/logactivity.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.logactivity import log_write_timestamp
from tests.support import Children, wait_until

# Echoes each line of stdin to stdout; with an argument, first opens that file for append.
ECHO = """
import sys
held = open(sys.argv[1], "a") if len(sys.argv) > 1 else None
if held:
    held.write("opened\\n"); held.flush()
print("ready", flush=True)
for line in sys.stdin:
    print(line.strip(), flush=True)
"""
Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn(children: Children) -> Spawn:
    def start(*args: str, **popen: Any) -> subprocess.Popen[str]:
        popen.setdefault("stderr", subprocess.DEVNULL)  # not pytest's capture file
        return children.python(ECHO, *args, ready=False, **popen)

    return start


def wait_ready(child: subprocess.Popen[str]) -> None:
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"


def test_stdout_redirected_to_a_file(tmp_path: Path, spawn: Spawn) -> None:
    out = tmp_path / "train.out"
    with out.open("w") as f:
        child = spawn(stdout=f)
    wait_until(lambda: b"ready" in out.read_bytes())
    os.utime(out, (1000.0, 1000.0))
    assert log_write_timestamp(child.pid, []) == 1000.0

    assert child.stdin is not None
    child.stdin.write("epoch 1\n")
    child.stdin.flush()
    wait_until(lambda: b"epoch 1" in out.read_bytes())
    assert log_write_timestamp(child.pid, []) == out.stat().st_mtime > 1000.0


def test_stderr_counts_too(tmp_path: Path, spawn: Spawn) -> None:
    err = tmp_path / "train.err"
    with err.open("w") as f:
        child = spawn(stderr=f)
    wait_ready(child)
    os.utime(err, (2000.0, 2000.0))
    assert log_write_timestamp(child.pid, []) == 2000.0


def test_pipes_have_no_log(spawn: Spawn) -> None:
    child = spawn(stderr=subprocess.PIPE)
    wait_ready(child)
    assert log_write_timestamp(child.pid, []) is None
    assert log_write_timestamp(child.pid, ["*"]) is None  # pipes never match a glob


def test_dev_null_and_tty_have_no_log(spawn: Spawn) -> None:
    controller, terminal = os.openpty()
    try:
        child = spawn(stdout=subprocess.DEVNULL, stderr=terminal)
        # No wait needed: Popen returns after exec, and the fds are set before it.
        assert log_write_timestamp(child.pid, []) is None
    finally:
        os.close(controller)
        os.close(terminal)


def test_open_file_matching_a_glob(tmp_path: Path, spawn: Spawn) -> None:
    log = tmp_path / "x.log"
    child = spawn(str(log))
    wait_ready(child)
    os.utime(log, (3000.0, 3000.0))
    assert log_write_timestamp(child.pid, ["*.log"]) == 3000.0
    assert log_write_timestamp(child.pid, [str(tmp_path / "*.log")]) == 3000.0
    assert log_write_timestamp(child.pid, ["*.txt", "*.log"]) == 3000.0
    assert log_write_timestamp(child.pid, ["*.txt"]) is None
    assert log_write_timestamp(child.pid, []) is None  # open files only count with globs


def test_latest_of_stdout_and_log(tmp_path: Path, spawn: Spawn) -> None:
    log, out = tmp_path / "x.log", tmp_path / "out"
    with out.open("w") as f:
        child = spawn(str(log), stdout=f)
    wait_until(lambda: b"ready" in out.read_bytes())
    os.utime(log, (3000.0, 3000.0))
    os.utime(out, (4000.0, 4000.0))
    assert log_write_timestamp(child.pid, ["*.log"]) == 4000.0
    os.utime(log, (5000.0, 5000.0))
    assert log_write_timestamp(child.pid, ["*.log"]) == 5000.0


def test_deleted_log_still_being_written(tmp_path: Path, spawn: Spawn) -> None:
    log = tmp_path / "x.log"
    child = spawn(str(log))
    wait_ready(child)
    os.utime(log, (3000.0, 3000.0))
    log.unlink()  # rotated away without copytruncate: the process still writes to it
    assert log_write_timestamp(child.pid, ["*.log"]) == 3000.0


def test_vanished_process(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert log_write_timestamp(child.pid, ["*.log"]) is None
    assert log_write_timestamp(4242, ["*.log"], proc_root=tmp_path) is None
