"""Keep links that acted: each link's nonce acts once (actuator/keeplinks.py)."""

from __future__ import annotations

from actuator.store.database import DUPLICATE, Database


class KeepLinkQueries(Database):
    def use_keep_link(self, nonce: str, case_id: int, now: float, action: str) -> bool:
        """Record that the link acted; False when it already had (a reused link)."""
        try:
            with self._tx() as conn:
                conn.execute(
                    "INSERT INTO keep_links (nonce, case_id, used_at, action) VALUES (?,?,?,?)",
                    (nonce, case_id, now, action),
                )
        except DUPLICATE:
            return False
        return True

    def keep_link_use(self, nonce: str) -> tuple[float, str] | None:
        rows = self._read("SELECT used_at, action FROM keep_links WHERE nonce = ?", (nonce,))
        return (rows[0]["used_at"], rows[0]["action"]) if rows else None
