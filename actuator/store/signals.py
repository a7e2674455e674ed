"""Signals sent, and the counts the rate limits judge by."""

from __future__ import annotations

from typing import Any

from actuator.store.database import Database


class SignalQueries(Database):
    def record_signal(self, case_id: int, pid: int, signal_name: str, now: float) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO signals (case_id, ts, pid, signal) VALUES (?, ?, ?, ?)",
                (case_id, now, pid, signal_name),
            )

    def signals_for(self, case_id: int) -> list[dict[str, Any]]:
        rows = self._read("SELECT * FROM signals WHERE case_id = ? ORDER BY id", (case_id,))
        return [{"ts": r["ts"], "pid": r["pid"], "signal": r["signal"]} for r in rows]

    def terminations_since(self, since_mono: float, boot_id: str, node: str | None = None) -> int:
        """SIGTERMs sent since `since_mono` (boot-time clock of this boot)."""
        sql = "SELECT COUNT(*) AS n FROM cases WHERE term_mono >= ? AND boot_id = ?"
        params: tuple[Any, ...] = (since_mono, boot_id)
        if node is not None:
            sql += " AND node = ?"
            params += (node,)
        return int(self._read(sql, params)[0]["n"])

    def flagged_since(self, since_mono: float, node: str) -> int:
        rows = self._read(
            "SELECT COUNT(DISTINCT pid || ':' || start_ticks) AS n FROM cases "
            "WHERE created_mono >= ? AND node = ?",
            (since_mono, node),
        )
        return int(rows[0]["n"])
