"""Private files the actuator and the node agent create: SQLite databases (the store, the
agent's signal journal), 0600 from the first byte."""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path


def create_private(path: str) -> None:
    """Create the database file 0600 before SQLite first opens it (its -wal and -shm files
    copy the mode). Only ever a new file: opening and closing an existing one outside SQLite
    drops every POSIX lock the process holds on it, so another process takes itself for the
    last reader, checkpoints and deletes the write-ahead log, and this process's next
    commits go to a deleted file (decisions lost; seen as "database disk image is malformed")."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
