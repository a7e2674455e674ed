"""Repeat habits' count: an owner's reclaims within a window, since an SRE's last reset."""

from __future__ import annotations

from actuator.store.database import Database


class RepeatQueries(Database):
    def reclaims_since(self, user: str, since: float) -> int:
        """The owner's cases reclaimed whose SIGTERM (or eviction, or scancel) went out at
        or after `since` (or the last reset): a time set once, never moved by later updates."""
        since = max(since, self.repeat_reset_at(user))
        rows = self._read(
            'SELECT COUNT(*) AS n FROM cases WHERE "user" = ? AND state = ? AND term_at >= ?',
            (user, "reclaimed", since),
        )
        return int(rows[0]["n"]) if rows else 0

    def knows_user(self, user: str) -> bool:
        """Whether any case (kept for storage.retention) has named this owner."""
        rows = self._read('SELECT 1 AS known FROM cases WHERE "user" = ? LIMIT 1', (user,))
        return bool(rows)

    def repeat_reset_at(self, user: str) -> float:
        rows = self._read(
            "SELECT value FROM counters WHERE name = 'repeat_reset' AND label = ?", (user,)
        )
        return float(rows[0]["value"]) if rows else 0.0

    def reset_repeats(self, user: str, at: float) -> None:
        """Count the owner's reclaims from `at` on (an SRE's decision; audited by the caller)."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO counters (name, label, value) VALUES ('repeat_reset', ?, ?) "
                "ON CONFLICT (name, label) DO UPDATE SET value = excluded.value",
                (user, int(at) + 1),  # counters hold integers: from the next second on
            )
