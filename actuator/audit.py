"""The audit log: append-only JSON lines, fsync'd before any side effect it describes.

Every write takes an exclusive lock (a side file, so rotation can rename the log), appends
and fsyncs. A record of what already happened (a notice sent, signals sent) may leave its
fsync to `flush()`, once per node's pass: nothing follows it, and every record that a side
effect follows is still fsync'd before that effect. A write is all-or-nothing: if the disk
fills mid-write the file is cut back to where it was, and a torn last line left by a crash
is cut off before the next append, so a partial record never glues onto the next one. The
log is rotated by size (`log.1`, …) and read from the end, a page at a time.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)
_BLOCK = 64 * 1024
_PROBE_BYTES = 4096
MAX_BACKLOG_BYTES = 16 * 2**20  # records of what was done, waiting out a full disk


class Event(StrEnum):
    """What an audit record is about (its `event` field); a StrEnum, so the JSON is text."""

    ALERT_DUPLICATE = "alert_duplicate"
    ALERT_REJECTED = "alert_rejected"
    AUTH_FAILED = "auth_failed"
    BREAKER_OPEN = "breaker_open"
    BREAKER_RESET = "breaker_reset"
    REPEAT_RESET = "repeat_reset"
    DECISION = "decision"
    DECISION_ABORTED = "decision_aborted"
    DEMAND_SOURCE = "demand_source"  # a demand source went down or came back
    FREED_FOR_REQUEST = "freed_for_request"  # a GPU reclaimed for a waiting request is free
    HANDED_OFF = "handed_off"  # the waiting request's own process holds the GPU (proven)
    GPU_TAKEN = "gpu_taken"  # a reclaimed GPU's next holder appeared on it
    NEEDLESS_RECLAIM = "needless_reclaim"  # nobody took a reclaimed GPU within the window
    FOLLOWUP = "followup"
    KEEP_AHEAD = "keep_ahead"
    KEEP_LINK = "keep_link"
    KEEP_REVOKED = "keep_revoked"
    KEEP_SOCKET = "keep_socket"
    KUBE_RECLAIM = "kube_reclaim"
    KUBE_VERIFIED = "kube_verified"
    NOTICE = "notice"
    SIGNALS = "signals"
    CHECKPOINT = "checkpoint"  # the suspend rung's driver call, or the owner's resume
    SLURM_CANCEL = "slurm_cancel"
    SLURM_VERIFIED = "slurm_verified"
    SNOOZE = "snooze"
    STEP_ERROR = "step_error"
    WAIT = "wait"  # a caller joined the node's wait list
    WAIT_SERVED = "wait_served"  # a waiter was given GPUs


class Record(Protocol):
    """An audit record (one per event, actuator/audit_records.py): its JSON line."""

    def to_json(self) -> dict[str, Any]: ...


class AuditError(Exception):
    """The audit record could not be written durably; the caller must not act."""


class AuditLog:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = 100 * 2**20,
        keep: int = 5,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()
        # Records written with sync=False: inode -> an open descriptor of it, fsync'd by
        # flush() (held open, so a rotation meanwhile cannot hide the file from it).
        self._unsynced: dict[int, int] = {}
        # Records of what was done that a full disk refused: written before the next record.
        self._backlog: list[bytes] = []
        self.dropped = 0  # such records lost because the backlog was full
        # Told how many were lost, each time some are: the store counts them for /metrics
        # (every worker answers the same), and a lost record is never silent.
        self._on_dropped = on_dropped

    # -- writing ------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
            try:
                fd = os.open(self.lock_path, flags, 0o600)
            except FileNotFoundError:  # no directory (yet, or any more): made, then locked
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.lock_path, flags, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def write(self, record: Record, *, sync: bool = True) -> dict[str, Any]:
        """Append `record` (a `ts` is added) durably; raise AuditError if that fails."""
        return self.write_many([record], sync=sync)[0]

    def write_many(self, records: list[Record], *, sync: bool = True) -> list[dict[str, Any]]:
        """Append several records with one fsync; all or none are written. With
        `sync=False` (only for records no side effect follows) the fsync is `flush()`'s or
        a later synced write's; the records are readable at once either way, and a full
        disk does not lose them: they wait in memory and go first into the next write that
        succeeds (so they precede every later record), keeping their own `ts`."""
        now = time.time()
        lines = [{"ts": now, **r.to_json()} for r in records]
        data = b"".join(
            (json.dumps(r, default=str, separators=(",", ":")) + "\n").encode() for r in lines
        )
        try:
            with self._locked():
                payload = b"".join(self._backlog) + data
                self._append(payload, sync=sync)
                self._backlog.clear()
        except OSError as exc:
            if sync:
                raise AuditError(
                    f"audit log {self.path} not writable: {exc.strerror or exc}"
                ) from exc
            self._keep_for_later(data, exc)
        return lines

    def _append(self, payload: bytes, *, sync: bool) -> None:
        """Under the lock: append all of `payload` (fsync'd with `sync`) or none of it."""
        self._rotate_if_needed(len(payload))
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        held = False
        try:
            start = _repair_tail(fd)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                if sync:
                    os.fsync(fd)
            except OSError:
                os.ftruncate(fd, start)  # all or nothing: no partial record stays
                raise
            held = self._track(fd, synced=sync)
        finally:
            if not held:
                os.close(fd)

    def _keep_for_later(self, data: bytes, exc: OSError) -> None:
        lost = 0
        with self._lock:
            if sum(map(len, self._backlog)) + len(data) > MAX_BACKLOG_BYTES:
                lost = data.count(b"\n")
                self.dropped += lost
                log.error(
                    "audit log %s not writable (%s) and %d bytes wait already: %d record(s) "
                    "of what was done are lost",
                    self.path,
                    exc.strerror or exc,
                    MAX_BACKLOG_BYTES,
                    self.dropped,
                )
            else:
                self._backlog.append(data)
        if lost:
            if self._on_dropped is not None:
                try:
                    self._on_dropped(lost)
                except Exception as error:  # counting must not turn a loss into a failure
                    log.error("could not count %d lost audit record(s): %s", lost, error)
            return
        log.warning(
            "audit log %s not writable (%s): the record waits for the next write",
            self.path,
            exc.strerror or exc,
        )

    def _track(self, fd: int, *, synced: bool) -> bool:
        """Under the lock: the file's unsynced records are synced now (an fsync covers the
        whole file), or `fd` is held for flush(); True when it is held."""
        inode = os.fstat(fd).st_ino
        if synced:
            earlier = self._unsynced.pop(inode, None)
            if earlier is not None:
                os.close(earlier)
            return False
        if inode in self._unsynced:
            return False  # held already
        self._unsynced[inode] = fd
        return True

    def flush(self) -> None:
        """Write the records a full disk refused, and fsync those written with sync=False;
        AuditError if either fails (the refused ones wait on)."""
        if self._backlog:
            self.write_many([], sync=True)
        with self._lock:
            held, self._unsynced = self._unsynced, {}
        problem: OSError | None = None
        for fd in held.values():
            try:
                os.fsync(fd)
            except OSError as exc:
                problem = problem or exc
            finally:
                os.close(fd)
        if problem is not None:
            raise AuditError(
                f"audit log {self.path} not synced: {problem.strerror or problem}"
            ) from problem

    @property
    def unsynced_files(self) -> int:
        """Files holding records not yet fsync'd (0 after flush())."""
        return len(self._unsynced)

    def _rotate_if_needed(self, incoming: int) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size == 0 or size + incoming <= self.max_bytes:
            return
        for index in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{index}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{index + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self.path.with_name(f"{self.path.name}.{self.keep + 1}").unlink(missing_ok=True)
        log.info("audit log rotated (%d bytes)", size)

    def check_writable(self) -> str | None:
        """None when a record can be written now, else why not (for /-/ready).

        A real write of a few KiB next to the log, fsync'd: every worker gets the same
        answer, it turns bad when the disk is full and good again when space returns."""
        probe = self.path.with_name(f".{self.path.name}.probe-{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.close(fd)
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, b"\0" * _PROBE_BYTES)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            return f"audit log {self.path} not writable: {exc.strerror or exc}"
        finally:
            probe.unlink(missing_ok=True)
        return None

    # -- reading ------------------------------------------------------------------------

    def tail(self, limit: int = 100, case_id: int | None = None) -> list[dict[str, Any]]:
        """The last `limit` records (optionally of one case), oldest first."""
        return self.page(limit, case_id)[0]

    def page(
        self, limit: int = 100, case_id: int | None = None, before: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Up to `limit` records that end before byte offset `before` (default: the end),
        read backwards; returns them oldest first and the offset to pass for the page
        before (None at the start of the file)."""
        found: list[dict[str, Any]] = []
        try:
            with self.path.open("rb") as fh:
                end = fh.seek(0, os.SEEK_END) if before is None else before
                for offset, raw in _lines_backwards(fh, end):
                    try:
                        record = json.loads(raw)
                    except ValueError:
                        continue
                    if case_id is None or record.get("case") == case_id:
                        found.append(record)
                        if len(found) == limit:
                            found.reverse()
                            return found, offset if offset > 0 else None
        except FileNotFoundError:
            return [], None
        except OSError as exc:  # a directory, no permission, an I/O error: unreadable now
            raise AuditError(
                f"cannot read the audit log {self.path}: {exc.strerror or exc}"
            ) from exc
        found.reverse()
        return found, None


def _repair_tail(fd: int) -> int:
    """Cut a torn last line (no newline: a crash or a full disk mid-write) off the file;
    returns the size the next record starts at."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    start = max(0, size - _BLOCK)
    while True:
        chunk = os.pread(fd, size - start, start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            keep = start + cut + 1
            break
        if start == 0:
            keep = 0
            break
        start = max(0, start - _BLOCK)
    os.ftruncate(fd, keep)
    log.warning("audit log: cut a torn last record (%d bytes)", size - keep)
    return keep


def _lines_backwards(fh: Any, end: int) -> Iterator[tuple[int, bytes]]:
    """(start offset, line) of each complete line ending at or before `end`, last first."""
    position = end
    pending = b""
    while position > 0:
        start = max(0, position - _BLOCK)
        fh.seek(start)
        chunk = fh.read(position - start) + pending
        position = start
        lines = chunk.split(b"\n")
        pending = lines[0]  # may continue in the previous block
        offset = position + len(pending) + 1
        complete = []
        for line in lines[1:]:
            complete.append((offset, line))
            offset += len(line) + 1
        for line_offset, line in reversed(complete):
            if line:
                yield line_offset, line
    if pending:
        yield 0, pending
