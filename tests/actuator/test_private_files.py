"""Private database files: 0600 from the first byte, and an existing file never opened
again outside SQLite (that would drop the process's locks on it)."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from actuator.private_files import create_private


def test_a_new_file_is_0600_before_sqlite_opens_it_and_its_wal_copies_the_mode(
    tmp_path: Path,
) -> None:
    old = os.umask(0)  # even with a permissive umask
    try:
        path = tmp_path / "deep" / "store.db"
        create_private(str(path))
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.commit()
        assert stat.S_IMODE((tmp_path / "deep" / "store.db-wal").stat().st_mode) == 0o600
        conn.close()
    finally:
        os.umask(old)


def test_an_existing_file_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(b"kept")
    path.chmod(0o640)
    before = path.stat()
    create_private(str(path))
    after = path.stat()
    assert path.read_bytes() == b"kept" and stat.S_IMODE(after.st_mode) == 0o640
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
