"""The audit log: append-only JSON lines, fsync'd before any side effect it describes."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any


class AuditError(Exception):
    """The audit record could not be written durably; the caller must not act."""


class AuditLog:
    """One JSON object per line. Each write opens, locks, appends, fsyncs and closes, so
    several workers can share the file and log rotation (rename + new file) just works."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.last_error: str | None = None

    def write(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append `record` (a `ts` is added) durably; raise AuditError if that fails."""
        return self.write_many([record])[0]

    def write_many(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append several records with one fsync; all or none are acknowledged."""
        now = time.time()
        records = [{"ts": now, **r} for r in records]
        line = b"".join(
            (json.dumps(r, default=str, separators=(",", ":")) + "\n").encode() for r in records
        )
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(
                    self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640
                )
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    view = memoryview(line)
                    while view:
                        written = os.write(fd, view)
                        view = view[written:]
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                self.last_error = f"audit log {self.path} not writable: {exc.strerror or exc}"
                raise AuditError(self.last_error) from exc
        self.last_error = None
        return records

    def check_writable(self) -> str | None:
        """None when the log can be appended to, else why not (for /-/ready)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
            os.close(fd)
        except OSError as exc:
            return f"audit log {self.path} not writable: {exc.strerror or exc}"
        return self.last_error

    def tail(self, limit: int = 100, case_id: int | None = None) -> list[dict[str, Any]]:
        """The last `limit` records (optionally of one case), oldest first."""
        out: deque[dict[str, Any]] = deque(maxlen=limit)
        try:
            with self.path.open("rb") as fh:
                for raw in fh:
                    try:
                        rec = json.loads(raw)
                    except ValueError:
                        continue
                    if case_id is None or rec.get("case") == case_id:
                        out.append(rec)
        except FileNotFoundError:
            return []
        return list(out)
