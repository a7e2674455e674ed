"""Evidence pictures (actuator/evidence/): saved with their case, pruned with it."""

from __future__ import annotations

from actuator.store.database import Database


class PictureQueries(Database):
    def save_picture(self, case_id: int, created: float, png: bytes) -> int:
        with self._tx() as conn:
            row = conn.execute(
                "INSERT INTO pictures (case_id, created, png) VALUES (?,?,?) RETURNING id",
                (case_id, created, png),
            ).fetchone()
        return int(row["id"])

    def picture(self, case_id: int, picture_id: int) -> bytes | None:
        """The PNG, when that picture belongs to that case."""
        rows = self._read(
            "SELECT png FROM pictures WHERE id = ? AND case_id = ?", (picture_id, case_id)
        )
        return bytes(rows[0]["png"]) if rows else None

    def latest_picture(self, case_id: int) -> int | None:
        rows = self._read("SELECT max(id) AS id FROM pictures WHERE case_id = ?", (case_id,))
        return int(rows[0]["id"]) if rows and rows[0]["id"] is not None else None
