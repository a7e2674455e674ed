"""Keeps asked before any case existed (`gpu-reclaimer keep PID --for 2h` on a process that
has not been flagged yet): kept by process identity, honoured when a case opens for it,
listed and revocable."""

from __future__ import annotations

from dataclasses import dataclass

from actuator.store.database import Database, Row

# The keep in force for one process (node, pid, start ticks, boot id; now): the latest asked,
# neither revoked nor expired. One predicate for every reader (store/guard.py too).
ACTIVE_KEEP = (
    "FROM keeps WHERE node = ? AND pid = ? AND start_ticks = ? AND boot_id = ? "
    "AND revoked = 0 AND until_ts > ? ORDER BY id DESC LIMIT 1"
)


@dataclass(frozen=True)
class AdvanceKeep:
    id: int
    node: str
    pid: int
    start_ticks: int
    boot_id: str
    uid: int
    until: float  # wall clock
    created: float
    by: str
    revoked: bool


def _keep(row: Row) -> AdvanceKeep:
    r = row  # sqlite3.Row or psycopg's dict_row: both by column name
    return AdvanceKeep(
        r["id"],
        r["node"],
        r["pid"],
        r["start_ticks"],
        r["boot_id"],
        r["uid"],
        r["until_ts"],
        r["created"],
        r["by_whom"],
        bool(r["revoked"]),
    )


class KeepQueries(Database):
    def add_keep(
        self,
        node: str,
        pid: int,
        start_ticks: int,
        boot_id: str,
        uid: int,
        until: float,
        now: float,
        by: str,
    ) -> AdvanceKeep:
        """Keep this process until `until`; an earlier active keep of it is replaced."""
        with self._tx() as conn:
            conn.execute(
                "UPDATE keeps SET revoked = 1 WHERE node = ? AND pid = ? AND start_ticks = ? "
                "AND boot_id = ? AND revoked = 0",
                (node, pid, start_ticks, boot_id),
            )
            conn.execute(
                "INSERT INTO keeps (node, pid, start_ticks, boot_id, uid, until_ts, created, "
                "by_whom) VALUES (?,?,?,?,?,?,?,?)",
                (node, pid, start_ticks, boot_id, uid, until, now, by),
            )
        found = self.active_keep(node, pid, start_ticks, boot_id, now)
        assert found is not None
        return found

    def active_keep(
        self, node: str, pid: int, start_ticks: int, boot_id: str, now: float
    ) -> AdvanceKeep | None:
        rows = self._read(f"SELECT * {ACTIVE_KEEP}", (node, pid, start_ticks, boot_id, now))
        return _keep(rows[0]) if rows else None

    def list_keeps(self, node: str, now: float, uid: int | None = None) -> list[AdvanceKeep]:
        """Active keeps on `node` (of `uid` only, when given)."""
        sql = "SELECT * FROM keeps WHERE node = ? AND revoked = 0 AND until_ts > ?"
        params: tuple[object, ...] = (node, now)
        if uid is not None:
            sql, params = sql + " AND uid = ?", (*params, uid)
        return [_keep(r) for r in self._read(sql + " ORDER BY until_ts", params)]

    def revoke_keep(self, keep_id: int) -> bool:
        with self._tx() as conn:
            done = conn.execute(
                "UPDATE keeps SET revoked = 1 WHERE id = ? AND revoked = 0", (keep_id,)
            )
            return bool(done.rowcount)
