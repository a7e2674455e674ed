"""Who must never be signalled, whatever an alert or a policy says.

Our own processes are protected by identity: this process, every process recorded in the
runtime directory (exporter, agent, actuator master and workers; see exporter/ownprocs.py)
and all their ancestors, each pinned by (PID, start ticks). Never by what a command line
says. Then PID 1, kernel threads, root and system uids, protected users, and protected
commands (regexes fully matched against the executable, argv[0], and the module or script
Python runs).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from actuator.policy import Protect
from exporter import ownprocs, procfs
from exporter.identity import command_name, user_name
from exporter.procfs import ProcStat, ProcStatus

OWN_REFRESH_SECONDS = 1.0


def command_names(pid: int, proc_root: Path = procfs.PROC) -> tuple[str, ...]:
    """Names a protected-command regex is matched against: comm, the executable, argv[0],
    and for Python the module of `-m MOD` or the script's name."""
    argv = procfs.read_cmdline(pid, proc_root)
    names = [procfs.read_comm(pid, proc_root), procfs.read_exe_name(pid, proc_root)]
    if argv:
        names.append(os.path.basename(argv[0]))
        names.append(command_name(argv))
    return tuple(dict.fromkeys(n for n in names if n))


class Protection:
    def __init__(
        self,
        protect: Protect,
        *,
        proc_root: Path = procfs.PROC,
        runtime_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.protect = protect
        self.proc_root = proc_root
        self.clock = clock
        self._patterns = [re.compile(p) for p in protect.effective_commands]
        self._own: frozenset[tuple[int, int]] = frozenset()
        self._own_at = float("-inf")
        self._lock = threading.Lock()
        self._records = ownprocs.OwnRecords(runtime_dir, proc_root)

    def own_processes(self) -> frozenset[tuple[int, int]]:
        """(pid, start ticks) of this process, our recorded processes and their ancestors."""
        with self._lock:
            now = self.clock()
            if now - self._own_at < OWN_REFRESH_SECONDS:
                return self._own
            roots = {os.getpid()}
            roots.update(p.pid for p in self._records.live())
            keys: set[tuple[int, int]] = set()
            for root in roots:
                pid = root
                while pid > 0:
                    stat = procfs.read_stat(pid, self.proc_root)
                    if stat is None or (pid, stat.start_ticks) in keys:
                        break
                    keys.add((pid, stat.start_ticks))
                    pid = stat.ppid
            self._own, self._own_at = frozenset(keys), now
            return self._own

    def reason(
        self, stat: ProcStat, status: ProcStatus, names: tuple[str, ...] | None = None
    ) -> str | None:
        """Why this process must never be signalled, or None. `names`: its command_names,
        when the caller has just read them."""
        if stat.pid <= 1:
            return "pid 1"
        if stat.is_kernel_thread:
            return "kernel thread"
        if (stat.pid, stat.start_ticks) in self.own_processes():
            return "a gpu-reclaimer process or its ancestor"
        uid = status.uid
        if self.protect.protect_root and 0 in status.uids:
            return "root"
        if uid < self.protect.protected_uid_below:
            return f"uid {uid} < {self.protect.protected_uid_below}"
        if self.protect.users and user_name(uid) in self.protect.users:
            return f"protected user {user_name(uid)}"
        for name in command_names(stat.pid, self.proc_root) if names is None else names:
            for pattern in self._patterns:
                if pattern.fullmatch(name):
                    return f"protected command {name!r} (pattern {pattern.pattern!r})"
        return None
