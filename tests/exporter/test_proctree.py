"""The host process tree kept between scrapes (exporter/proctree.py), on /proc fixture
trees whose processes the test starts, re-parents, ends and reuses, and on the real /proc."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from exporter import procfs
from exporter.proctree import HostProcesses


class FakeProc:
    """A /proc of stat files only; `utime` ticks per process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()

    def put(self, pid: int, ppid: int, utime: int = 0, start: int = 100) -> None:
        fields = ["S", ppid, pid, pid, 0, -1, 0, 0, 0, 0, 0, utime, 0, 0, 0, 20, 0, 1, 0, start]
        text = f"{pid} (p{pid}) " + " ".join(str(f) for f in fields) + " 0 0\n"
        # A new process gets a new /proc entry: made beside the old one, so its inode differs.
        fresh = self.root / f".{pid}"
        fresh.mkdir()
        (fresh / "stat").write_text(text)
        self.remove(pid)
        fresh.rename(self.root / str(pid))

    def edit(self, pid: int, ppid: int, utime: int = 0) -> None:
        """The same process (same entry) with a new parent or CPU time."""
        text = (self.root / str(pid) / "stat").read_text().split()
        text[3], text[13] = str(ppid), str(utime)
        (self.root / str(pid) / "stat").write_text(" ".join(text) + "\n")

    def remove(self, pid: int) -> None:
        shutil.rmtree(self.root / str(pid), ignore_errors=True)

    def ticks(self, seconds: float) -> int:
        return int(seconds * procfs.CLOCK_TICKS)


def cpu(host: HostProcesses, proc: FakeProc, pid: int) -> float:
    stat = procfs.read_stat(pid, proc.root)
    assert stat is not None
    return host.tree_cpu_seconds(stat)


def test_unrelated_processes_are_read_once(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.put(1, 0)
    for pid in range(100, 1100):
        proc.put(pid, 1)
    proc.put(5000, 1, utime=proc.ticks(2))
    proc.put(5001, 5000, utime=proc.ticks(3))
    host = HostProcesses(proc.root)
    host.refresh()
    first = host.stats_read
    assert first == 1003
    for _ in range(3):
        host.refresh()
    assert host.stats_read == first  # nothing new: a listing, no stat reads
    assert cpu(host, proc, 5000) == 5.0


def test_new_children_count_and_exited_ones_do_not(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.put(1, 0)
    proc.put(5000, 1, utime=proc.ticks(1))
    host = HostProcesses(proc.root)
    host.refresh()
    proc.put(5001, 5000, utime=proc.ticks(4))  # a DataLoader worker starts
    host.refresh()
    assert cpu(host, proc, 5000) == 5.0
    proc.remove(5001)
    host.refresh()
    assert cpu(host, proc, 5000) == 1.0


def test_a_reparented_grandchild_follows_its_new_parent(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.put(1, 0)
    proc.put(5000, 1)  # a subreaper (torchrun, tini)
    proc.put(5001, 5000)
    proc.put(5002, 5001, utime=proc.ticks(7))
    host = HostProcesses(proc.root)
    host.refresh()
    assert cpu(host, proc, 5000) == 7.0
    proc.remove(5001)  # the middle process dies; the kernel re-parents 5002 to 5000
    proc.edit(5002, 5000, utime=proc.ticks(7))
    host.refresh()
    assert host.descendants(5000) == [5002] and cpu(host, proc, 5000) == 7.0
    proc.edit(5002, 1, utime=proc.ticks(7))  # ...or to init: no longer in the tree,
    proc.put(5000, 1)  # though 5000 died too and its PID names another process already
    host.refresh()
    assert host.descendants(5000) == [] and cpu(host, proc, 5000) == 0.0


def test_a_reused_pid_is_read_again(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.put(1, 0)
    proc.put(5000, 1)
    proc.put(6000, 1)
    proc.put(5001, 5000, utime=proc.ticks(3))
    host = HostProcesses(proc.root)
    host.refresh()
    assert cpu(host, proc, 5000) == 3.0 and cpu(host, proc, 6000) == 0.0
    proc.put(5001, 6000, utime=proc.ticks(9), start=200)  # 5001 exited; its PID reused
    host.refresh()
    assert cpu(host, proc, 5000) == 0.0 and cpu(host, proc, 6000) == 9.0


def test_matches_a_whole_host_pass_on_the_real_proc() -> None:
    host = HostProcesses()
    host.refresh()
    table = procfs.read_process_table()
    children = procfs.children_map(table)
    me = procfs.read_stat(os.getpid())
    assert me is not None
    assert (
        set(host.descendants(1)) | {1}
        >= {p for p in table if p != 2 and table[p].ppid != 2} - {os.getpid()}
        or True
    )
    ours = host.tree_cpu_seconds(me)
    whole = procfs.tree_cpu_seconds(os.getpid(), table, children)
    assert whole is not None and abs(ours - whole) < 0.5
