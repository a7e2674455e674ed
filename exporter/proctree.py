"""The host's process tree, kept between scrapes, so a scrape costs what the GPU processes'
own trees cost, not what every process on the host costs.

Each scrape lists /proc once: one getdents pass gives every PID with the inode number of its
/proc entry. A PID's stat is read again only when

- its entry is new: a new process, or a reused PID (the kernel gives the entry of a new
  process a new inode number, so reuse between two scrapes is seen), or
- its parent is no longer listed, or its parent's PID now names another process: it was
  re-parented (to init or a subreaper) and its parent link must be read afresh.

Every other process keeps the parent link it was read with: a process's parent changes only
by re-parenting. The CPU ticks of the trees a scrape asks for are always read fresh.
"""

from __future__ import annotations

import os
from pathlib import Path

from exporter.procfs import CLOCK_TICKS, PROC, ProcStat, read_stat


class HostProcesses:
    def __init__(self, proc_root: Path = PROC) -> None:
        self.proc_root = proc_root
        self._root = str(proc_root)
        self._entries: dict[str, int] = {}  # /proc entry name -> its inode number
        self._parent: dict[int, int] = {}
        self._children: dict[int, list[int]] = {}
        self.stats_read = 0  # parent links read, for tests and benchmarks

    def refresh(self) -> None:
        """List /proc and bring the parent links up to date (see the module's docstring)."""
        with os.scandir(self._root) as listing:
            # Keyed by name, every entry: no per-entry conversion or filtering in Python.
            entries = {e.name: e.inode() for e in listing}
        old = self._entries
        self._entries = entries
        if entries == old:
            return
        # Set operations on the items: the unchanged majority costs no Python-level loop.
        gone = {int(n) for n in old.keys() - entries.keys() if n.isdigit()}
        fresh = {int(n) for n, _ in entries.items() - old.items() if n.isdigit()}
        # A process is re-parented only when its parent ends: the children of every ended
        # PID (and of every reused one) are read again.
        reused = {pid for pid in fresh if str(pid) in old}
        recheck = {c for pid in gone | reused for c in self._children.get(pid, ())}
        for pid in gone:
            self._parent.pop(pid, None)
        for pid in fresh | {c for c in recheck if str(c) in entries}:
            self._read_parent(pid)
        children: dict[int, list[int]] = {}
        for pid, ppid in self._parent.items():
            children.setdefault(ppid, []).append(pid)
        self._children = children

    def _read_parent(self, pid: int) -> None:
        self.stats_read += 1
        stat = read_stat(pid, self.proc_root)
        if stat is None:  # gone meanwhile
            self._parent.pop(pid, None)
        else:
            self._parent[pid] = stat.ppid

    def __contains__(self, pid: int) -> bool:
        return pid in self._parent

    def descendants(self, pid: int) -> list[int]:
        """The PIDs below `pid` in the tree as of the last refresh."""
        found: list[int] = []
        stack = list(self._children.get(pid, ()))
        seen = {pid}
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            found.append(current)
            stack.extend(self._children.get(current, ()))
        return found

    def tree_cpu_seconds(self, root: ProcStat) -> float:
        """CPU seconds of `root` (its fresh stat) and its descendants, live and reaped; the
        descendants' ticks are read now. One that exited meanwhile counts nothing, as in a
        whole-host pass read a moment later."""
        total = root.cpu_ticks + root.reaped_children_ticks
        for pid in self.descendants(root.pid):
            stat = read_stat(pid, self.proc_root)
            if stat is not None and stat.ppid == self._parent.get(pid):
                total += stat.cpu_ticks + stat.reaped_children_ticks
        return total / CLOCK_TICKS
