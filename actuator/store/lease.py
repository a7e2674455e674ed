"""The reconciler lease: one holder across every worker and replica, and the fence that
makes a write by a holder that lost it change nothing."""

from __future__ import annotations

from dataclasses import dataclass

from actuator.store.database import Conn, Database


class LeaseLost(Exception):
    """This reconciler no longer holds the lease: it must not act (fencing)."""


@dataclass(frozen=True)
class Fence:
    """Proof a write may act: the lease holder, renewed in the same transaction."""

    holder: str
    mono: float
    ttl: float


def check_fence(conn: Conn, fence: Fence | None, name: str = "reconciler") -> None:
    """Renew the lease in this transaction, or raise LeaseLost (the caller must not act)."""
    if fence is None:
        return
    cur = conn.execute(
        "UPDATE lease SET expires = ? WHERE name = ? AND holder = ? AND expires > ?",
        (fence.mono + fence.ttl, name, fence.holder, fence.mono),
    )
    if cur.rowcount != 1:
        raise LeaseLost(f"{fence.holder} no longer holds the {name} lease")


class LeaseQueries(Database):
    def acquire_lease(self, holder: str, mono: float, ttl: float, name: str = "reconciler") -> bool:
        """Take or renew the lease; exactly one holder at a time across all workers."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO lease (name, holder, expires) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                "expires = excluded.expires, progressed = CASE WHEN lease.holder = "
                "excluded.holder THEN lease.progressed ELSE NULL END "
                "WHERE lease.holder = excluded.holder OR lease.expires < ?",
                (name, holder, mono + ttl, mono),
            )
            row = conn.execute("SELECT holder FROM lease WHERE name = ?", (name,)).fetchone()
        return row is not None and row["holder"] == holder

    def mark_progress(self, holder: str, mono: float, ttl: float, name: str = "reconciler") -> bool:
        """A pass finished: say so and renew the lease in one transaction (one commit per
        tick instead of two); False when the lease is no longer ours."""
        with self._tx() as conn:
            cur = conn.execute(
                "UPDATE lease SET progressed = ?, expires = ? "
                "WHERE name = ? AND holder = ? AND expires > ?",
                (mono, mono + ttl, name, holder, mono),
            )
        return bool(cur.rowcount == 1)

    def progress(self, name: str = "reconciler") -> tuple[str, float, float | None] | None:
        """(holder, expires, progressed) of the lease, or None before any reconciler ran."""
        rows = self._read("SELECT holder, expires, progressed FROM lease WHERE name = ?", (name,))
        if not rows:
            return None
        return rows[0]["holder"], rows[0]["expires"], rows[0]["progressed"]

    def renew_lease(self, holder: str, mono: float, ttl: float, name: str = "reconciler") -> bool:
        """Extend a lease this holder still holds (never one that expired: another may have
        taken it); False when it is no longer ours."""
        try:
            with self._tx() as conn:
                check_fence(conn, Fence(holder, mono, ttl), name)
        except LeaseLost:
            return False
        return True

    def release_lease(self, holder: str, name: str = "reconciler") -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM lease WHERE name = ? AND holder = ?", (name, holder))
