"""The live re-check (actuator/live.py): the tree from the kernel's lists of children, or
where there are none one /proc pass shared by the re-checks of a tick; every member's CPU
read fresh."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from actuator.live import Evidence, Inspector
from actuator.models import LiveState, Target
from actuator.policy import Protect
from actuator.protect import Protection
from exporter import procfs
from exporter.nvml_reader import NvmlReading

# A parent that idles while its child burns CPU (a DataLoader worker's shape).
PARENT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


class Mono:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def inspector(mono: Mono, *, kernel_lists: bool = True) -> Inspector:
    protect = Protect(protect_root=False, protected_uid_below=0)
    return Inspector(
        Protection(protect),
        lambda _not_before: NvmlReading(up=True),
        Evidence(),
        nvml_timeout=1.0,
        mono=mono,
        kernel_lists=kernel_lists,
    )


def _inspector(evidence: Evidence, mono: Mono) -> Inspector:
    """A re-check of this host's processes with no GPU readings, nothing protected."""
    return Inspector(
        Protection(Protect(protect_root=False, protected_uid_below=0)),
        lambda _not_before: NvmlReading(up=True),
        evidence,
        nvml_timeout=1.0,
        mono=mono,
    )


def target(pid: int) -> Target:
    stat = procfs.read_stat(pid)
    assert stat is not None
    return Target("n", pid, stat.start_ticks, procfs.boot_id(), "GPU-0", 0.0)


def test_without_kernel_lists_re_checks_of_one_tick_share_a_proc_pass_but_read_cpu_fresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes = []
    real = procfs.read_process_table
    monkeypatch.setattr(procfs, "read_process_table", lambda root: passes.append(1) or real(root))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        mono = Mono()
        check = inspector(mono, kernel_lists=False)
        first = check.inspect(target(parent.pid))
        time.sleep(1.0)
        second = check.inspect(target(parent.pid))  # the same tick: no second pass
        assert len(passes) == 1
        assert [m.pid for m in second.members] == [parent.pid, child]
        assert first.cpu_seconds is not None and second.cpu_seconds is not None
        # The child's burn, read fresh (a tenth of a core: it shares a busy machine).
        assert second.cpu_seconds - first.cpu_seconds >= 0.1
        mono.now += 1.0  # the next tick: a new pass
        check.inspect(target(parent.pid))
        assert len(passes) == 2
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()


# A parent that starts a second child when told to (a DataLoader's next epoch).
SPAWNER = (
    "import subprocess, sys, time\n"
    "sleep = [sys.executable, '-c', 'import time; time.sleep(60)']\n"
    "first = subprocess.Popen(sleep)\n"
    "print(first.pid, flush=True)\n"
    "sys.stdin.readline()\n"
    "second = subprocess.Popen(sleep)\n"
    "print(second.pid, flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.parametrize("kernel_lists", [True, False], ids=["kernel-lists", "shared-pass"])
def test_a_child_forked_since_the_last_look_of_the_tick(
    monkeypatch: pytest.MonkeyPatch, kernel_lists: bool
) -> None:
    """From the kernel's lists, the tree is as it is now, without a pass over the host; a
    shared pass sees a new child only at the next tick."""
    passes = []
    real = procfs.read_process_table
    monkeypatch.setattr(procfs, "read_process_table", lambda root: passes.append(1) or real(root))
    parent = subprocess.Popen(
        [sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdin is not None and parent.stdout is not None
        first = int(parent.stdout.readline())
        check = inspector(Mono(), kernel_lists=kernel_lists)
        before = check.inspect(target(parent.pid))
        assert [m.pid for m in before.members] == [parent.pid, first]
        parent.stdin.write("go\n")
        parent.stdin.flush()
        second = int(parent.stdout.readline())
        after = check.inspect(target(parent.pid))  # the same tick
        if kernel_lists:
            assert [m.pid for m in after.members] == [parent.pid, first, second]
            assert passes == []
        else:
            assert [m.pid for m in after.members] == [parent.pid, first]
            assert passes == [1]
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()


@pytest.mark.reliability(57)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a pipe of another uid")
def test_defect_1_a_named_pipe_under_the_heartbeat_name_does_not_hold_the_re_check(
    tmp_path: Path,
) -> None:
    """Another uid's named pipe under this process's heartbeat names: the re-check answers
    at once, with no heartbeat (it held the case before: the reader opened the pipe)."""
    beats = tmp_path / "beats"
    beats.mkdir()
    namespace = os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]")
    for name in (f"{namespace}-{os.getpid()}.json", f"0-{os.getpid()}.json"):
        os.mkfifo(beats / name)
        os.chown(beats / name, 65534, 65534)
    check = _inspector(Evidence(heartbeat_dir=beats), Mono())
    seen: list[LiveState] = []
    worker = threading.Thread(target=lambda: seen.append(check.inspect(target(os.getpid()))))
    worker.daemon = True
    worker.start()
    worker.join(5)
    assert seen, "the re-check blocked on the pipe"
    assert seen[0].exists and seen[0].heartbeat is None


def test_the_re_check_reads_the_owners_presence_through_the_exporters_reader(
    tmp_path: Path,
) -> None:
    """A real pty and a utmp record of the owner's (root here) session: the re-check says so,
    reuses the reading for PRESENCE_MAX_AGE, and the agent's wire carries it."""
    from actuator.fleet.wire import dump_live, load_live
    from actuator.live import PRESENCE_MAX_AGE
    from exporter.presence import USER_PROCESS
    from tests.helpers.utmp import utmp_record

    main, follower = os.openpty()
    leader = subprocess.Popen(["sleep", "60"])
    try:
        name = os.ttyname(follower).removeprefix("/dev/")
        os.chown(f"/dev/{name}", os.getuid(), -1)
        utmp = tmp_path / "utmp"
        utmp.write_bytes(utmp_record(USER_PROCESS, leader.pid, name, "root"))
        mono = Mono()
        check = _inspector(Evidence(utmp=utmp), mono)
        live = check.inspect(target(os.getpid()))
        assert live.presence is not None
        assert live.presence.sessions == 1 and live.presence.terminal == name
        assert live.presence.present(1800.0) is not None
        assert load_live(dump_live(live)).presence == live.presence
        assert live.evidence()["presence"]["sessions"] == 1  # audited with the decision

        utmp.write_bytes(b"")  # logged out
        assert check.inspect(target(os.getpid())).presence == live.presence  # reused
        mono.now += PRESENCE_MAX_AGE
        assert check.inspect(target(os.getpid())).presence.sessions == 0
        blind = _inspector(Evidence(utmp=None), mono)
        assert blind.inspect(target(os.getpid())).presence is None
    finally:
        leader.kill()
        leader.wait()
        os.close(follower)
        os.close(main)


def test_a_notebook_tab_is_presence_for_the_kernels_under_its_server_only(
    tmp_path: Path,
) -> None:
    """Issue 59: a browser connected to the owner's notebook server holds back the kernel
    under that server, never another process of the same owner (a script in a terminal, a
    kernel of another server with no tab)."""
    import pwd

    from actuator.demo.notebook_tab import NotebookTab, read_info, server_argv
    from tests.support import wait_until

    nobody = pwd.getpwnam("nobody").pw_uid
    as_nobody = ["setpriv", f"--reuid={nobody}", "--clear-groups", "sleep", "300"]
    info = tmp_path / "kernel.info"
    server = subprocess.Popen(server_argv(tmp_path, "nobody", info, as_nobody))
    script = subprocess.Popen(as_nobody)
    try:
        port, kernel = read_info(info)
        tab = NotebookTab(port)
        utmp = tmp_path / "utmp"
        utmp.write_bytes(b"")  # no login session: the tab alone
        check = _inspector(Evidence(utmp=utmp), Mono())
        for pid in (kernel, script.pid):  # setpriv has made each the owner's
            wait_until(lambda pid=pid: getattr(procfs.read_status(pid), "uid", 0) == nobody, 10)
        under = check.inspect(target(kernel)).presence
        assert under is not None and under.notebook_connections == 1
        assert under.present(1800.0) == "1 connection(s) to its notebook server"
        beside = check.inspect(target(script.pid)).presence
        assert beside is not None and beside.notebook_connections == 0
        assert beside.present(1800.0) is None  # the owner's tab says nothing of this one
        tab.close()
    finally:
        for process in (server, script):
            process.kill()
            process.wait(10)
