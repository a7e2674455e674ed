"""When a process last wrote its log: mtimes of the regular files it writes to.

Looks at the files behind stdout and stderr (``nohup``, ``> train.log``, a batch system's
output file) and, when log globs are configured, at the process's open files that match one.
Pipes, terminals, sockets and /dev/null carry no mtime worth having and are skipped. A file
shared with other writers (one ``nohup.out`` for several jobs) credits all of them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path

PROC = Path("/proc")
_STDIO = ("1", "2")
_DELETED = " (deleted)"


def log_write_timestamp(pid: int, globs: Sequence[str], proc_root: Path = PROC) -> float | None:
    """Latest mtime (unix seconds) of the process's log files; None if it has none.

    Never raises: a vanished process or an unreadable fd directory gives None.
    """
    fd_dir = f"{proc_root}/{pid}/fd"  # plain strings: this runs per process per scrape
    mtimes = [_regular_mtime(f"{fd_dir}/{fd}") for fd in _STDIO]
    if globs:
        mtimes.extend(_regular_mtime(f"{fd_dir}/{fd}") for fd in _matching_fds(fd_dir, globs))
    found = [m for m in mtimes if m is not None]
    return max(found) if found else None


def _matching_fds(fd_dir: str, globs: Sequence[str]) -> list[str]:
    """Descriptors (other than stdout/stderr) open on a path that matches a glob."""
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    matching = []
    for fd in fds:
        if fd in _STDIO:
            continue
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue  # closed meanwhile
        # Non-files read as "pipe:[123]", "socket:[456]", "anon_inode:[eventfd]".
        if not target.startswith("/"):
            continue
        target = target.removesuffix(_DELETED)  # a rotated-away log is still being written
        if any(fnmatchcase(target, pattern) for pattern in globs):
            matching.append(fd)
    return matching


def _regular_mtime(fd_link: str) -> float | None:
    try:
        st = os.stat(fd_link)  # follows the magic link to the open file itself
    except OSError:
        return None
    return st.st_mtime if stat.S_ISREG(st.st_mode) else None
