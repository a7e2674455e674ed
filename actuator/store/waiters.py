"""The node's wait list (`gpu-reclaimer wait`): who waits for GPUs, in the order they came,
until they are given GPUs, give up, or their time is up."""

from __future__ import annotations

from dataclasses import dataclass

from actuator.store.database import Database, Row

WAITING, SERVED, EXPIRED, LEFT = "waiting", "served", "expired", "left"


@dataclass(frozen=True)
class Waiter:
    id: int
    node: str
    uid: int
    pid: int  # the caller (`gpu-reclaimer wait`), proven by the socket's peer credentials
    start_ticks: int
    gpus: int  # whole GPUs, or 0 with memory_bytes on one GPU
    memory_bytes: int
    created: float
    expires: float
    state: str
    ended: float | None
    given: tuple[str, ...]  # UUIDs of the GPUs it was told are free
    # When a process was first seen on them (wall clock; 0: not yet): the promise is kept.
    taken: float = 0.0


def _waiter(row: Row) -> Waiter:
    """sqlite3.Row or psycopg's dict_row: both by column name."""
    fields = [k for k in Waiter.__dataclass_fields__ if k not in ("given", "taken")]
    values = {k: row[k] for k in fields}
    given = tuple(g for g in str(row["given"]).split(",") if g)
    return Waiter(**values, given=given, taken=float(row["taken"]))


class WaiterQueries(Database):
    def add_waiter(
        self,
        node: str,
        uid: int,
        pid: int,
        start_ticks: int,
        gpus: int,
        memory_bytes: int,
        now: float,
        expires: float,
    ) -> int:
        with self._tx() as conn:
            cur = conn.execute(
                "INSERT INTO waiters (node, uid, pid, start_ticks, gpus, memory_bytes, created, "
                "expires, state) VALUES (?,?,?,?,?,?,?,?,?) RETURNING id",
                (node, uid, pid, start_ticks, gpus, memory_bytes, now, expires, WAITING),
            )
            return int(cur.fetchone()["id"])

    def waiters(self, node: str, now: float) -> list[Waiter]:
        """Those still waiting on `node`, first come first."""
        rows = self._read(
            "SELECT * FROM waiters WHERE node = ? AND state = ? AND expires > ? ORDER BY id",
            (node, WAITING, now),
        )
        return [_waiter(r) for r in rows]

    def promised(self, node: str, since: float) -> list[Waiter]:
        """Served since `since` (taken or not): the promises a reading must be newer than."""
        rows = self._read(
            "SELECT * FROM waiters WHERE node = ? AND state = ? AND ended >= ? ORDER BY id",
            (node, SERVED, since),
        )
        return [_waiter(r) for r in rows]

    def mark_taken(self, waiter_id: int, at: float) -> None:
        """Its job was seen on its GPUs at `at` (the first time counts)."""
        with self._tx() as conn:
            conn.execute("UPDATE waiters SET taken = ? WHERE id = ? AND taken = 0", (at, waiter_id))

    def end_waiter(
        self, waiter_id: int, state: str, now: float, given: tuple[str, ...] = ()
    ) -> bool:
        """Served (with the GPUs it was given), expired or left; only a waiting one ends."""
        with self._tx() as conn:
            done = conn.execute(
                "UPDATE waiters SET state = ?, ended = ?, given = ? WHERE id = ? AND state = ?",
                (state, now, ",".join(given), waiter_id, WAITING),
            )
            return bool(done.rowcount)
