"""utmp records as glibc writes them, for tests of login sessions."""

from __future__ import annotations

import time

from exporter.presence import _RECORD


def utmp_record(kind: int, pid: int, line: str, user: str, host: str = "") -> bytes:
    """One record as glibc writes it (struct utmp, 384 bytes)."""
    now = int(time.time())
    return _RECORD.pack(
        kind, pid, line.encode(), line[-4:].encode(), user.encode(), host.encode(),
        0, 0, 0, now, 0, b"", b"",
    )  # fmt: skip
