"""GPU Reclaimer's own processes, by identity: each exporter, agent and actuator process
records (PID, start ticks, boot id) in the runtime directory when it starts, and the
actuator never signals a recorded process or any of its ancestors.

Identity, never a command line: a user's job whose argv mentions the exporter gains
nothing, and an exporter started with unusual flags is still recognised. A record counts
only while its process lives with the same start ticks on this boot (a stale file of a dead
process protects nobody), and only if it belongs to root or to the reader's own user, so
another user cannot make their job immune by writing a file.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from exporter import procfs
from exporter.hostile_file import HostileRead, open_directory, read_hostile

log = logging.getLogger(__name__)
RUNTIME_DIR_ENV = "GPU_RECLAIMER_RUNTIME_DIR"
DEFAULT_RUNTIME_DIR = Path("/run/gpu-reclaimer")
_SUBDIR = "self"


@dataclass(frozen=True)
class OwnProcess:
    role: str
    pid: int
    start_ticks: int
    boot_id: str


def runtime_dir() -> Path:
    """$GPU_RECLAIMER_RUNTIME_DIR, else /run/gpu-reclaimer."""
    value = os.environ.get(RUNTIME_DIR_ENV, "").strip()
    return Path(value) if value else DEFAULT_RUNTIME_DIR


def register(
    role: str, directory: Path | None = None, proc_root: Path = procfs.PROC
) -> Path | None:
    """Record this process; returns the file, or None (logged) when it cannot be written."""
    folder = (directory or runtime_dir()) / _SUBDIR
    pid = os.getpid()
    stat = procfs.read_stat(pid, proc_root)
    if stat is None:
        return None
    record = {
        "role": role,
        "pid": pid,
        "start_ticks": stat.start_ticks,
        "boot_id": procfs.boot_id(proc_root),
    }
    path = folder / f"{role}-{pid}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o755)
        tmp = folder / f".{role}-{pid}.tmp"
        tmp.write_text(json.dumps(record))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning(
            "cannot record this %s in %s (%s): the actuator still protects itself and its "
            "ancestors, but set %s to a writable directory shared with the actuator",
            role,
            folder,
            exc.strerror or exc,
            RUNTIME_DIR_ENV,
        )
        return None
    return path


def unregister(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def registered(directory: Path | None = None, proc_root: Path = procfs.PROC) -> list[OwnProcess]:
    """Live, trusted records; stale ones (dead process, reused PID, other boot) are skipped."""
    folder = open_directory(os.fspath((directory or runtime_dir()) / _SUBDIR))
    if folder is None:
        return []
    try:
        return _trusted_records(folder, proc_root)
    finally:
        os.close(folder)


def _trusted_records(folder: int, proc_root: Path) -> list[OwnProcess]:
    names = _listing(folder)
    trusted_owners = {0, os.geteuid()}
    this_boot = procfs.boot_id(proc_root)
    found = []
    for name in names:
        if not name.endswith(".json"):
            continue
        # A file another user could have put there is read as hostile input, like a
        # heartbeat: no symlink or pipe followed, the owner judged first, bounded.
        read = read_hostile(folder, name, lambda uid: uid in trusted_owners, max_bytes=4096)
        if not isinstance(read, HostileRead):
            continue
        try:
            record = json.loads(read.data)
            own = OwnProcess(
                role=str(record["role"]),
                pid=int(record["pid"]),
                start_ticks=int(record["start_ticks"]),
                boot_id=str(record["boot_id"]),
            )
        except (ValueError, KeyError, TypeError):
            continue
        stat = procfs.read_stat(own.pid, proc_root)
        if own.boot_id == this_boot and stat is not None and stat.start_ticks == own.start_ticks:
            found.append(own)
    return found


def _listing(folder: int) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []
