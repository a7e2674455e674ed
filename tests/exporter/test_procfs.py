"""The /proc readers (exporter/procfs.py), against real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from exporter import procfs


def _started(
    env: dict[str, str], args: tuple[str, ...] = (), setup: str = ""
) -> subprocess.Popen[str]:
    """A Python child with `env` and `args` that ran `setup`, once it runs: until exec,
    /proc/<pid>/environ and cmdline are still the forked parent's."""
    code = f"{setup}; {WAIT_READY}" if setup else WAIT_READY
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    return child


WAIT_READY = "print('ready', flush=True); import time; time.sleep(30)"


def test_one_variable_of_the_environment_a_process_was_started_with() -> None:
    env = {**os.environ, "GPU_RECLAIMER_KEEP": "4h", "OTHER": "GPU_RECLAIMER_KEEP=no"}
    child = _started(env, setup="import os; os.environ['GPU_RECLAIMER_KEEP'] = '9h'")
    try:
        # As exec'd: a later setenv inside the process is not what it was started with,
        # and a value that merely contains the name is not the variable.
        assert procfs.read_environ_value(child.pid, "GPU_RECLAIMER_KEEP") == "4h"
        assert procfs.read_environ_value(child.pid, "GPU_RECLAIMER") is None
        assert procfs.read_environ_value(child.pid, "NOT_SET_HERE") is None
    finally:
        child.kill()
        child.wait()
    assert procfs.read_environ_value(child.pid, "GPU_RECLAIMER_KEEP") is None  # gone


def test_the_process_table_links_parents_and_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        table = procfs.read_process_table()
        assert table[child.pid].ppid == os.getpid()
        assert child.pid in procfs.children_map(table)[os.getpid()]
        cpu = procfs.tree_cpu_seconds(os.getpid(), table, procfs.children_map(table))
        assert cpu is not None and cpu > 0
    finally:
        child.kill()
        child.wait()


FAMILY = """
import subprocess, sys, threading, time
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
parent_of_one = [sys.executable, "-c", f"import subprocess, time; subprocess.Popen({sleep!r}); "
                 "time.sleep(60)"]
kids = [subprocess.Popen(parent_of_one)]
# A child forked by another thread is listed under that thread, not under the main one.
thread = threading.Thread(target=lambda: kids.append(subprocess.Popen(sleep)))
thread.start()
thread.join()
print("ready", flush=True)
time.sleep(60)
"""


def test_a_subtree_is_read_from_the_kernels_lists_of_children(tmp_path: Path) -> None:
    family = subprocess.Popen([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True)
    expected: set[int] = set()
    assert family.stdout is not None and family.stdout.readline() == "ready\n"
    try:
        deadline = time.monotonic() + 10
        while True:  # the grandchild is started by the child, a moment later
            table = procfs.read_process_table()
            children = procfs.children_map(table)
            expected = set(children.get(family.pid, ()))
            expected |= {g for c in expected for g in children.get(c, ())}
            if len(expected) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(expected) == 3
        subtree = procfs.read_subtree(family.pid)
        assert subtree is not None
        assert set(subtree) == expected  # the same tree as a whole pass over the host
        assert {s.ppid for s in subtree.values()} <= expected | {family.pid}
    finally:
        for pid in expected:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        family.kill()
        family.wait()
    assert procfs.read_subtree(family.pid) is None  # gone
    (tmp_path / "5" / "task" / "5").mkdir(parents=True)  # a kernel without the lists
    assert procfs.read_subtree(5, tmp_path) is None


def test_status_gives_the_ids_a_process_runs_as() -> None:
    own = procfs.read_status(os.getpid())
    assert own is not None
    assert (own.uid, own.gid) == (os.getuid(), os.getgid())
    assert own.uids == {os.getuid(), os.geteuid()}
    assert set(own.groups) == set(os.getgroups())
    assert procfs.read_status(2**22 + 1) is None  # beyond pid_max: no such process


def test_status_is_read_by_its_own_lines_only(tmp_path: Path) -> None:
    """Only the lines judged by, and a name imitating one is not one (the kernel escapes a
    newline in a name, so no such line can start a line of its own)."""
    (tmp_path / "77").mkdir()
    status = tmp_path / "77" / "status"
    status.write_bytes(
        b"Name:\tUid:\\n0 0 0 0\n"
        b"Umask:\t0022\n"
        b"State:\tS (sleeping)\n"
        b"NSpid:\t77\t12\n"
        b"Uid:\t1001\t1002\t1001\t1001\n"
        b"Gid:\t1001\t1001\t1001\t1001\n"
        b"Groups:\t27 1001 \n"
    )
    parsed = procfs.read_status(77, tmp_path)
    assert parsed == procfs.ProcStatus(
        uid=1001, uids=frozenset({1001, 1002}), gid=1001, groups=(27, 1001), ns_pid=12
    )
    status.write_bytes(b"Name:\tx\nGid:\t5\t5\t5\t5\n")  # no Uid line: not judged at all
    assert procfs.read_status(77, tmp_path) is None
    status.write_bytes(b"Uid:\tnobody\nGid:\t5\n")
    assert procfs.read_status(77, tmp_path) is None


def test_long_proc_files_are_read_whole_and_a_limit_is_kept(tmp_path: Path) -> None:
    # An argv and an environment far above one read's 64 KiB (one argument or variable may
    # hold at most 128 KiB): the reads loop to the end.
    long_args = [c * 100_000 for c in "xyz"]
    env = {**os.environ, "BIG": "y" * 120_000, "GPU_RECLAIMER_KEEP": "2h"}
    child = _started(env, tuple(long_args))
    try:
        assert procfs.read_cmdline(child.pid)[-3:] == long_args
        environ = procfs.read_proc_bytes(f"/proc/{child.pid}/environ")
        assert environ is not None and b"BIG=" + b"y" * 120_000 in environ
        assert procfs.read_environ_value(child.pid, "GPU_RECLAIMER_KEEP") == "2h"
        capped = procfs.read_proc_bytes(f"/proc/{child.pid}/environ", 70_000)
        assert capped is not None and len(capped) == 70_000 and environ.startswith(capped)
    finally:
        child.kill()
        child.wait()
    assert procfs.read_proc_bytes(f"/proc/{child.pid}/environ") is None  # gone
    assert procfs.read_cmdline(child.pid) == []
    assert procfs.read_proc_bytes(str(tmp_path / "absent")) is None
