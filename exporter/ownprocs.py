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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from exporter import hostile_file, procfs
from exporter.hostile_file import HostileRead, Refusal

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
    return OwnRecords(directory, proc_root).live()


class OwnRecords:
    """The runtime directory's live, trusted records, read again at each `live()`.

    A record whose process is gone (no /proc entry, other start ticks, another boot) is
    gone for good: a PID with its start ticks never comes back on a boot. So a file found
    gone, or not to be trusted, is not opened again while it is the same file (`signature`:
    inode, size, times); a rewrite is read afresh. Records of killed processes (SIGKILL,
    the OOM killer) stay until the next boot, and each was read and judged again at every
    refresh: 197 of them, left by killed benchmark actuators, cost 3.3 ms of CPU a refresh
    (docs/performance.md, "Records of killed processes"). Now one `lstat` each: 0.5 ms.
    A process that cannot be told gone (its /proc entry unreadable for another reason) is
    skipped this time and judged again the next."""

    def __init__(
        self,
        directory: Path | None = None,
        proc_root: Path = procfs.PROC,
        *,
        read: Callable[..., HostileRead | Refusal] = hostile_file.read_hostile,
    ) -> None:
        self.directory = directory
        self.proc_root = proc_root
        self._read = read
        self._settled: dict[str, tuple[int, ...]] = {}  # name -> signature: never live

    def live(self) -> list[OwnProcess]:
        folder = hostile_file.open_directory(os.fspath((self.directory or runtime_dir()) / _SUBDIR))
        if folder is None:
            return []
        try:
            return self._trusted_records(folder)
        finally:
            os.close(folder)

    def _trusted_records(self, folder: int) -> list[OwnProcess]:
        names = [n for n in _listing(folder) if n.endswith(".json")]
        trusted_owners = {0, os.geteuid()}
        this_boot = procfs.boot_id(self.proc_root)
        settled: dict[str, tuple[int, ...]] = {}
        found = []
        for name in names:
            seen = hostile_file.look(folder, name)
            if isinstance(seen, Refusal):
                continue
            if self._settled.get(name) == hostile_file.signature(seen):
                settled[name] = hostile_file.signature(seen)
                continue
            # A file another user could have put there is read as hostile input, like a
            # heartbeat: no symlink or pipe followed, the owner judged first, bounded.
            read = self._read(folder, name, lambda uid: uid in trusted_owners, max_bytes=4096)
            if read is Refusal.OWNER:
                settled[name] = hostile_file.signature(seen)  # a new owner changes its ctime
            if not isinstance(read, HostileRead):
                continue
            own = _record(read.data)
            verdict = self._alive(own, this_boot) if own is not None else False
            if verdict and own is not None:
                found.append(own)
            elif verdict is False:
                settled[name] = hostile_file.signature(read.stat)
        self._settled = settled  # names gone from the directory are forgotten
        return found

    def _alive(self, own: OwnProcess, this_boot: str) -> bool | None:
        """True while the record's process runs; False when it is gone for good; None when
        /proc could not tell."""
        if own.boot_id != this_boot:
            return False
        stat = procfs.read_stat(own.pid, self.proc_root)
        if stat is not None:
            return stat.start_ticks == own.start_ticks
        return False if not os.path.lexists(f"{self.proc_root}/{own.pid}") else None


def _record(data: bytes) -> OwnProcess | None:
    try:
        record = json.loads(data)
        return OwnProcess(
            role=str(record["role"]),
            pid=int(record["pid"]),
            start_ticks=int(record["start_ticks"]),
            boot_id=str(record["boot_id"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def _listing(folder: int) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []
