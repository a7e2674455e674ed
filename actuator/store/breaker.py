"""The circuit breaker: one row, opened by the limits, closed only by an operator."""

from __future__ import annotations

from actuator.store.database import Database


class BreakerQueries(Database):
    def breaker(self) -> tuple[bool, float | None, str]:
        rows = self._read("SELECT open, since, reason FROM breaker WHERE id = 1")
        if not rows:
            return False, None, ""
        return bool(rows[0]["open"]), rows[0]["since"], rows[0]["reason"]

    def set_breaker(self, open_: bool, now: float, reason: str) -> bool:
        """Open or close the breaker; False when it already was in that position."""
        with self._tx() as conn:
            cur = conn.execute(
                "UPDATE breaker SET open = ?, since = ?, reason = ? WHERE id = 1 AND open != ?",
                (int(open_), now, reason, int(open_)),
            )
            return cur.rowcount == 1
