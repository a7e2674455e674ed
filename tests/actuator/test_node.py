"""The local node: live inspection and pidfd signalling with real processes."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from actuator.live import target_of
from actuator.models import Member
from actuator.node import LocalNode
from actuator.pidfds import Pidfds
from actuator.policy import Protect
from exporter import procfs
from exporter.sim.state import load_faults, save_faults
from tests.helpers.actuator import NODE, Workloads, alert_for, payload
from tests.support import wait_until

pytestmark = pytest.mark.timeout(90)
OPEN = Protect(protect_root=False, protected_uid_below=0)


def member(pid: int) -> Member:
    stat = procfs.read_stat(pid)
    assert stat is not None
    return Member(pid, stat.start_ticks, os.getuid())


def sleeper(*extra: str) -> subprocess.Popen[bytes]:
    code = "import signal, sys, time\n" + "\n".join(extra) + "\ntime.sleep(600)\n"
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.mark.reliability(18)
def test_a_hanging_nvml_call_bounds_the_recheck_and_leaks_no_thread(workloads: Workloads) -> None:
    w = workloads.spawn()
    node = LocalNode(NODE, OPEN, sim_dir=str(workloads.node_dir), nvml_timeout=1.0)
    target = target_of(NODE, w.pid, w.uuid)
    assert node.inspect(target).on_gpu is True
    save_faults(
        workloads.node_dir,
        dataclasses.replace(
            load_faults(workloads.node_dir), hang_call="nvmlDeviceGetComputeRunningProcesses"
        ),
    )
    time.sleep(0.3)
    threads = threading.active_count()
    for _ in range(100):
        started = time.monotonic()
        live = node.inspect(target)
        assert time.monotonic() - started < 1.6
        assert live.on_gpu is None and "did not answer" in " ".join(live.errors)
        time.sleep(0.01)
    assert threading.active_count() <= threads + 1  # the one stuck NVML worker, no pile-up
    save_faults(
        workloads.node_dir, dataclasses.replace(load_faults(workloads.node_dir), hang_call="")
    )
    assert wait_until(lambda: node.inspect(target).on_gpu is True, 10)


@pytest.mark.reliability(21)
def test_a_pid_nvml_lists_but_proc_lacks_is_never_signalled(
    workloads: Workloads, actuator_factory
) -> None:
    actuator = actuator_factory(workloads.node_dir)
    ghost = next(p for p in range(procfs.pid_max() - 1, 2, -1) if not Path(f"/proc/{p}").exists())
    save_faults(
        workloads.node_dir,
        dataclasses.replace(load_faults(workloads.node_dir), ghost_pids=((0, ghost, 2**30),)),
    )
    w = workloads.spawn()
    alert = alert_for(w)
    alert["labels"]["pid"] = str(ghost)
    actuator.post(payload(alert))
    wait_until(lambda: actuator.cases(limit=10), 10)
    case = wait_until(lambda: (c := actuator.cases()[0])["state"] not in ("pending",) and c, 10)
    assert case["state"] in ("cancelled", "refused") and case["target"]["pid"] == ghost
    assert actuator.metric("gpu_reclaimer_signals_sent_total", signal="SIGTERM") == 0


@pytest.mark.reliability(27)
def test_a_target_that_exits_after_its_pidfd_opened_is_already_gone() -> None:
    proc = sleeper()
    pidfds = Pidfds()
    m = member(proc.pid)
    assert pidfds.open(m) is not None
    proc.kill()
    proc.wait()  # reaped: the PID may now be reused, the pidfd still names the old process
    result = pidfds.send(m, signal.SIGTERM, dry_run=False)
    assert not result.sent and result.detail in ("already exited", "gone or identity changed")
    assert pidfds.alive([m]) == []


@pytest.mark.reliability(30)
def test_a_stopped_target_gets_sigcont_after_sigterm_and_exits() -> None:
    proc = sleeper("signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))")
    try:
        time.sleep(0.3)  # let it install the handler
        os.kill(proc.pid, signal.SIGSTOP)
        wait_until(lambda: (s := procfs.read_stat(proc.pid)) and s.state == "T", 5)
        started = time.monotonic()
        assert Pidfds().send(member(proc.pid), signal.SIGTERM, dry_run=False).sent
        assert proc.wait(5) == 0 and time.monotonic() - started < 2
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.reliability(32)
def test_a_zombie_is_not_a_target_and_names_its_parent(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'pass'])\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None
        zombie = int(parent.stdout.readline())
        wait_until(lambda: (s := procfs.read_stat(zombie)) and s.is_zombie, 10)
        node = LocalNode(NODE, OPEN, sim_dir=str(tmp_path / "none"))
        target = target_of(NODE, zombie, "GPU-x")
        live = node.inspect(target)
        assert not live.exists and f"parent pid {parent.pid}" in live.errors[0]
        results = node.signal_tree(target, [member(zombie)], signal.SIGTERM, dry_run=False)
        assert results and not any(r.sent for r in results)
    finally:
        parent.kill()
        parent.wait()


def test_a_shared_reading_is_never_older_than_the_process_it_judges() -> None:
    from actuator.node import _SharedReading

    calls: list[float] = []

    def read() -> None:
        calls.append(time.time())

    shared = _SharedReading(read)
    shared()
    shared()  # within the TTL: the same reading
    assert len(calls) == 1
    # A process that started after that reading was taken: read again.
    shared(not_before=time.time() + 0.001)
    assert len(calls) == 2
    shared(not_before=calls[-1] - 1)  # started before the new reading: shared
    assert len(calls) == 2


def test_callers_at_once_share_one_reading_and_none_reads_unknown() -> None:
    """The reconciler, the wait list's waiters and the keep socket read the node at once:
    one NVML reading is taken (bounded), the others wait for it and share it; none is told
    "NVML did not answer" because another caller was reading (the bounded call refuses a
    second call while one runs)."""
    import threading

    from actuator.node import _SharedReading
    from exporter.guard import BoundedCall
    from exporter.nvml_reader import NvmlReading

    calls: list[float] = []

    def slow_read() -> NvmlReading:
        calls.append(time.time())
        time.sleep(0.3)  # a scrape of a busy node
        return NvmlReading(up=True)

    shared = _SharedReading(BoundedCall(slow_read, timeout=2.0))
    answers: list[NvmlReading | None] = []
    threads = [threading.Thread(target=lambda: answers.append(shared())) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(answers) == 12 and all(a is not None and a.up for a in answers), answers
    assert len(calls) == 1
