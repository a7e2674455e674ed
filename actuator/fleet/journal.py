"""The agent's memory of escalation steps: each step (case id and signal) is carried out at
most once, across retries, replays and restarts of the agent.

A step is claimed in a committed transaction before any signal is sent and its results
recorded after; a step found claimed without results was interrupted mid-send (the agent
died), and is answered as such, never sent again.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from actuator.models import SignalResult
from actuator.private_files import create_private

IN_DOUBT = "in doubt: an earlier attempt of this step was interrupted; not sent again"


class SignalJournal:
    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = str(path)
        self.clock = clock
        self._lock = threading.Lock()
        create_private(self.path)
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS steps (key TEXT PRIMARY KEY, claimed REAL NOT NULL, "
            "results TEXT)"
        )

    def claim(self, key: str) -> list[SignalResult] | None:
        """None: the step is ours to carry out now. Otherwise what it did before (or, when
        it was interrupted, why nothing more is done)."""
        with self._lock:
            try:
                self._conn.execute(
                    "INSERT INTO steps (key, claimed) VALUES (?, ?)", (key, self.clock())
                )
                return None
            except sqlite3.IntegrityError:
                row = self._conn.execute(
                    "SELECT results FROM steps WHERE key = ?", (key,)
                ).fetchone()
        if row is None or row[0] is None:
            return [SignalResult(0, "", False, IN_DOUBT)]
        return [SignalResult(**r) for r in json.loads(row[0])]

    def finish(self, key: str, results: list[SignalResult]) -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE steps SET results = ? WHERE key = ?",
                (json.dumps([r.__dict__ for r in results]), key),
            )

    def prune(self, older_than: float) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM steps WHERE claimed < ?", (self.clock() - older_than,))
