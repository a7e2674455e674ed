"""Exporter side of heartbeats: which host process wrote which heartbeat file.

A file written by ``exporter.heartbeat`` carries the PID its writer sees, the inode of its
PID namespace and its start ticks. A host process matches when its innermost PID (last value
of ``NSpid:`` in /proc/<pid>/status), its PID namespace inode and its start ticks all agree;
a file without a namespace matches on the host PID and start ticks. Start ticks keep a dead
writer's file from being credited to a new process that got the same PID, and the file must
belong to the process's user (or root), so one user cannot keep another's job looking alive.
The directory is one users write into: every file is opened as hostile input
(`exporter.hostile_file`: no symlinks, pipes or devices, owner judged before reading,
bounded), so nothing there can block a scrape or a re-check.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from exporter.hostile_file import (
    HostileRead,
    Refusal,
    look,
    open_directory,
    read_hostile,
    signature,
)
from exporter.procfs import read_status, start_ticks

PROC = Path("/proc")
# A record is about 200 bytes; a file past this is not a heartbeat.
MAX_RECORD_BYTES = 4096


@dataclass(frozen=True)
class ProcessRef:
    """A host process whose heartbeat is wanted; `start_ticks` when the caller has just
    read them (the exporter has), which saves reading /proc/<pid>/stat again."""

    pid: int
    start_ticks: int | None = None


@dataclass(frozen=True)
class _Key:
    """How a host process appears to itself."""

    host_pid: int
    namespace: int | None
    ns_pid: int
    start_ticks: int
    writers: frozenset[int]  # uids that may write its heartbeat: its own, and root

    @cached_property
    def candidate_names(self) -> tuple[str, ...]:
        """The file names its heartbeat may have, the namespace's first."""
        host = f"0-{self.host_pid}.json"  # a writer that could not read its namespace
        if self.namespace is None:
            return (host,)
        return (f"{self.namespace}-{self.ns_pid}.json", host)


class HeartbeatReader:
    """Reads heartbeats scrape after scrape, keeping what cannot change while a process
    lives (its PID namespace, its PID in it) per (PID, start ticks): a scrape then costs one
    directory listing and one open per heartbeat file, not two /proc reads per process.
    The writers (the process's uids) can change (a job that drops root); they are re-read
    whenever a file's owner is not among the remembered ones, so a change is never missed."""

    def __init__(self, proc_root: Path = PROC) -> None:
        self._proc_root = proc_root
        self._keys: dict[tuple[int, int], _Key] = {}
        self._files: dict[str, _File] = {}  # by file name, in the one directory read
        # A file's verdict for a process, while neither changed: (file, key, timestamp).
        self._verdicts: dict[str, tuple[_File, _Key, float | None]] = {}

    def read(self, directory: Path, targets: Iterable[ProcessRef]) -> dict[int, float]:
        """Host PID -> timestamp of its heartbeat, for the targets that have one; never
        raises. Remembers only the targets of this call (the live GPU processes)."""
        refs = {ref.pid: ref for ref in targets}  # a PID may use several GPUs
        folder = open_directory(os.fspath(directory)) if refs else None
        if folder is None:
            names: set[str] = set()
        else:
            try:
                names = set(os.listdir(folder))  # one listing per scrape, then named files
            except OSError:
                names = set()
        keys: dict[tuple[int, int], _Key] = {}
        found: dict[int, float] = {}
        try:
            for pid, ref in refs.items():
                if not names:
                    break  # the common case without heartbeat users: no /proc reads at all
                ticks = (
                    ref.start_ticks
                    if ref.start_ticks is not None
                    else start_ticks(pid, self._proc_root)
                )
                if ticks is None:
                    continue
                key = self._keys.get((pid, ticks)) or _process_key(pid, ticks, self._proc_root)
                if key is None:
                    continue
                keys[(pid, ticks)] = key
                for name in key.candidate_names:
                    if name not in names or folder is None:
                        continue
                    read = self._read_file(folder, name, key)
                    if read is None:
                        continue
                    file, key = read
                    keys[(pid, ticks)] = key
                    known = self._verdicts.get(name)
                    if known is not None and known[0] is file and known[1] is key:
                        if known[2] is not None:  # the same file, the same process
                            found[pid] = known[2]
                            break
                        continue
                    timestamp = _matching_timestamp(file.record, key)
                    self._verdicts[name] = (file, key, timestamp)
                    if timestamp is not None:
                        found[pid] = timestamp
                        break
        finally:
            if folder is not None:
                os.close(folder)
        self._keys = keys
        self._files = {name: f for name, f in self._files.items() if name in names}
        self._verdicts = {n: v for n, v in self._verdicts.items() if n in self._files}
        return found

    def _writer(self, key: _Key, owner: int) -> _Key | None:
        """The process's key if ``owner`` may write its heartbeat, else None. In a shared
        directory anyone can write any name: only the process's own user (or root) may
        speak for it; its uids may have changed since they were remembered."""
        if owner in key.writers:
            return key
        fresh = _process_key(key.host_pid, key.start_ticks, self._proc_root)
        return fresh if fresh is not None and owner in fresh.writers else None

    def _read_file(self, folder: int, name: str, key: _Key) -> tuple[_File, _Key] | None:
        """The file, and the process's key as its owner was judged against, or None when
        the entry is not a regular file its process's user (or root) owns, or not a record.
        A file is read again only when a look without following it (inode, size,
        modification and change times) says it changed; most files are unchanged between
        scrapes. The owner is judged before a byte is read (`read_hostile`)."""
        seen = look(folder, name)
        if isinstance(seen, Refusal):
            self._files.pop(name, None)
            return None
        known = self._files.get(name)
        if known is not None and known.signature == signature(seen):
            writer = self._writer(key, known.owner)
            return None if writer is None else (known, writer)
        judged: list[_Key] = []

        def may_own(owner: int) -> bool:
            writer = self._writer(key, owner)
            if writer is not None:
                judged.append(writer)
            return writer is not None

        read = read_hostile(folder, name, may_own, MAX_RECORD_BYTES)
        record = _record(read.data) if isinstance(read, HostileRead) else None
        if record is None or not isinstance(read, HostileRead):
            self._files.pop(name, None)
            return None
        file = _File(signature=signature(read.stat), owner=read.stat.st_uid, record=record)
        self._files[name] = file
        return file, judged[-1]


def read_heartbeats(
    directory: Path, targets: Iterable[ProcessRef], proc_root: Path = PROC
) -> dict[int, float]:
    """Host PID -> timestamp of its heartbeat, for the targets that have one; never raises
    (one call, nothing remembered: the actuator's re-check of one process)."""
    return HeartbeatReader(proc_root).read(directory, targets)


def _process_key(pid: int, ticks: int, proc_root: Path) -> _Key | None:
    # The innermost PID (last value of NSpid:) is the PID the process sees; kernels before
    # 4.1 have no such line, and there the host PID is the only PID. The start ticks are
    # read again after the status so that a PID reused in between is not mistaken.
    status = read_status(pid, proc_root)
    namespace = _pid_namespace(pid, proc_root)
    if status is None or start_ticks(pid, proc_root) != ticks:
        return None
    return _Key(
        host_pid=pid,
        namespace=namespace,
        ns_pid=status.ns_pid,
        start_ticks=ticks,
        writers=frozenset({0, *status.uids}),
    )


def _pid_namespace(pid: int, proc_root: Path) -> int | None:
    """Inode from the link text 'pid:[4026531836]'; None if unreadable."""
    try:
        link = os.readlink(proc_root / str(pid) / "ns" / "pid")
        return int(link[link.index("[") + 1 : link.index("]")])
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class _File:
    """A heartbeat file as read: who owns it, what it says, and the stat it was read at."""

    signature: tuple[int, ...]
    owner: int
    record: dict[str, object]


def _record(data: bytes) -> dict[str, object] | None:
    """The heartbeat's JSON object; None if it is not one (half-written, garbage)."""
    try:
        record = json.loads(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _matching_timestamp(record: dict[str, object], key: _Key) -> float | None:
    """The record's timestamp if it was written by the process ``key`` describes."""
    if record.get("closed", False) is not False:
        return None  # a closed heartbeat (or a bogus mark) reports no activity
    pid = _int(record.get("pid"))
    namespace = record.get("pid_namespace")
    timestamp = record.get("timestamp")
    if _int(record.get("start_ticks")) != key.start_ticks:
        return None
    if namespace is None:
        if pid != key.host_pid:
            return None
    elif key.namespace is None or _int(namespace) != key.namespace or pid != key.ns_pid:
        return None
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        return None
    return float(timestamp) if math.isfinite(timestamp) else None


def _int(value: object) -> int | None:
    # JSON true/false are ints to Python; they are not PIDs.
    return value if isinstance(value, int) and not isinstance(value, bool) else None
