"""Signals sent, and the counts the rate limits judge by."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actuator.ladder import LIMITED
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

    def terminations_since(self, since_mono: float, clock: str, node: str | None = None) -> int:
        """Cases that took the ladder's limited rung (SIGTERM) since `since_mono` on the
        clock `clock` (Database.clock_id): a reading of another clock (an earlier boot) says
        nothing about "since". Not the target's boot id: a central actuator's cases are on
        other nodes' boots."""
        assert LIMITED.stamps is not None  # a column name from the ladder, never from input
        column = LIMITED.stamps.mono
        sql = f"SELECT COUNT(*) AS n FROM cases WHERE {column} >= ? AND clock = ?"
        params: tuple[Any, ...] = (since_mono, clock)
        if node is not None:
            sql += " AND node = ?"
            params += (node,)
        return int(self._read(sql, params)[0]["n"])

    def flagged_since(self, since_mono: float, node: str) -> int:
        rows = self._read(
            "SELECT COUNT(DISTINCT pid || ':' || start_ticks) AS n FROM cases "
            "WHERE created_mono >= ? AND node = ? AND clock = ?",
            (since_mono, node, self.clock_id),
        )
        return int(rows[0]["n"])
