"""Signals sent, and the processes flagged per node (the counts the rate limits judge by
are read with the rest of a step's guard: actuator/store/guard.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actuator.store.database import Database


@dataclass(frozen=True)
class SignalSent:
    """One signal (or a scheduler's step, by name) that went out to a case's process."""

    case_id: int
    pid: int
    signal: str
    ts: float


class SignalQueries(Database):
    def record_signals(self, sent: Sequence[SignalSent]) -> None:
        """Signals already sent (a record of what was done, not a decision), in one commit."""
        if not sent:
            return
        with self._tx() as conn:
            for s in sent:
                conn.execute(
                    "INSERT INTO signals (case_id, ts, pid, signal) VALUES (?, ?, ?, ?)",
                    (s.case_id, s.ts, s.pid, s.signal),
                )

    def signals_for(self, case_id: int) -> list[dict[str, Any]]:
        rows = self._read("SELECT * FROM signals WHERE case_id = ? ORDER BY id", (case_id,))
        return [{"ts": r["ts"], "pid": r["pid"], "signal": r["signal"]} for r in rows]

    def flagged_since(self, since_mono: float, node: str) -> int:
        rows = self._read(
            "SELECT COUNT(DISTINCT pid || ':' || start_ticks) AS n FROM cases "
            "WHERE created_mono >= ? AND node = ? AND clock = ?",
            (since_mono, node, self.clock_id),
        )
        return int(rows[0]["n"])
