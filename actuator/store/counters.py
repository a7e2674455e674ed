"""Counters (webhook requests, rejected alerts) and the one-read snapshot /metrics serves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actuator.store.database import Conn, Database

Bump = tuple[str, str, int]  # (counter, label, by)


def bump(conn: Conn, name: str, label: str, by: int = 1) -> None:
    conn.execute(
        "INSERT INTO counters (name, label, value) VALUES (?, ?, ?) "
        "ON CONFLICT (name, label) DO UPDATE SET value = counters.value + excluded.value",
        (name, label, by),
    )


def demand_to_free(seconds: float) -> list[Bump]:
    """One wait, from demand to a free GPU, as its histogram's bumps (cumulative buckets,
    the sum in milliseconds: counters are integers)."""
    found: list[Bump] = [
        ("demand_to_free_bucket", repr(b), 1) for b in DEMAND_TO_FREE_BUCKETS if seconds <= b
    ]
    return [
        *found,
        ("demand_to_free_count", "", 1),
        ("demand_to_free_ms", "", round(seconds * 1000)),
    ]


class CounterQueries(Database):
    def count(self, name: str, label: str = "", by: int = 1) -> None:
        self.count_many([(name, label, by)])

    def count_many(self, bumps: Sequence[Bump]) -> None:
        """Several counters bumped in one commit (a node pass's reclaims)."""
        if not bumps:
            return
        with self._tx() as conn:
            for name, label, by in bumps:
                bump(conn, name, label, by)

    def count_request(self, code: int) -> None:
        with self._tx() as conn:
            bump(conn, "webhook_requests", str(code))

    def demand_up(self) -> dict[str, bool]:
        """The demand sources as last recorded (by whichever reconciler acted)."""
        rows = self._read("SELECT label, value FROM counters WHERE name = 'demand_up'")
        return {r["label"]: bool(r["value"]) for r in rows}

    def set_demand(self, up: dict[str, bool], waiting: dict[str, int]) -> None:
        """The demand sources as last read (gauges: replaced, not added)."""
        with self._tx() as conn:
            conn.execute("DELETE FROM counters WHERE name IN ('demand_up', 'demand_waiting')")
            for name, value in (("demand_up", up), ("demand_waiting", waiting)):
                for label, n in value.items():
                    conn.execute(
                        "INSERT INTO counters (name, label, value) VALUES (?, ?, ?)",
                        (name, label, int(n)),
                    )

    def metric_snapshot(self) -> dict[str, Any]:
        """Everything /metrics needs, in one read transaction."""
        with self._snapshot() as conn:
            states = {
                r["state"]: r["n"]
                for r in conn.execute("SELECT state, COUNT(*) AS n FROM cases GROUP BY state")
            }
            freed = conn.execute("SELECT COALESCE(SUM(freed_bytes), 0) AS b FROM cases").fetchone()
            refusals = {
                r["reason_code"]: r["n"]
                for r in conn.execute(
                    "SELECT reason_code, COUNT(*) AS n FROM cases WHERE state = 'refused' "
                    "GROUP BY reason_code"
                )
            }
            signals = {
                r["signal"]: r["n"]
                for r in conn.execute("SELECT signal, COUNT(*) AS n FROM signals GROUP BY signal")
            }
            requests = {
                r["label"]: r["value"]
                for r in conn.execute(
                    "SELECT label, value FROM counters WHERE name = 'webhook_requests'"
                )
            }
            auth_failures = {
                r["label"]: r["value"]
                for r in conn.execute(
                    "SELECT label, value FROM counters WHERE name = 'auth_failures'"
                )
            }
            rejected = conn.execute(
                "SELECT COALESCE(SUM(value), 0) AS n FROM counters WHERE name = 'alerts_rejected'"
            ).fetchone()
            breaker = conn.execute("SELECT open FROM breaker WHERE id = 1").fetchone()
            notices = conn.execute(
                "SELECT COUNT(DISTINCT case_id) AS n FROM timeline WHERE state = 'notified'"
            ).fetchone()
            to_reclaim = _time_to_reclaim(conn)
            named: dict[str, dict[str, int]] = {}
            for r in conn.execute(
                "SELECT name, label, value FROM counters WHERE name IN ('reclaims', "
                "'needless_reclaims', 'audit_records_dropped', "
                "'demand_up', 'demand_waiting', 'demand_to_free_bucket', "
                "'demand_to_free_count', 'demand_to_free_ms')"
            ):
                named.setdefault(r["name"], {})[r["label"]] = int(r["value"])
        return {
            "named": named,
            "states": states,
            "freed_bytes": int(freed["b"]),
            "refusals": refusals,
            "signals": signals,
            "requests": requests,
            "alerts_rejected": int(rejected["n"]),
            "auth_failures": auth_failures,
            "breaker_open": bool(breaker["open"]) if breaker else False,
            "notices": int(notices["n"]),
            "time_to_reclaim": to_reclaim,
        }


# Seconds from a case's opening to its process tree's exit (the shipped timings reclaim in
# about 11 minutes; the demo's in seconds).
TIME_TO_RECLAIM_BUCKETS = (
    5.0,
    15.0,
    30.0,
    60.0,
    300.0,
    600.0,
    900.0,
    1200.0,
    1800.0,
    3600.0,
    7200.0,
    21600.0,
    86400.0,
)


# Seconds from demand appearing to its GPU being free (the grace, then SIGTERM's exit).
DEMAND_TO_FREE_BUCKETS = (30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0)


def _time_to_reclaim(conn: Conn) -> dict[str, Any]:
    """The histogram of reclaimed cases' durations, counted in SQL (one row back however many
    cases the database holds). A wall-clock step cannot make a duration negative."""
    durations = (
        "SELECT CASE WHEN t.ts > c.created THEN t.ts - c.created ELSE 0 END AS d "
        "FROM timeline t JOIN cases c ON c.id = t.case_id WHERE t.state = 'reclaimed'"
    )
    columns = ", ".join(
        f"COALESCE(SUM(CASE WHEN d <= {b!r} THEN 1 ELSE 0 END), 0) AS b{i}"
        for i, b in enumerate(TIME_TO_RECLAIM_BUCKETS)
    )
    row = conn.execute(
        f"SELECT {columns}, COUNT(*) AS n, COALESCE(SUM(d), 0) AS total FROM ({durations}) AS x"
    ).fetchone()
    counts = [row[f"b{i}"] for i in range(len(TIME_TO_RECLAIM_BUCKETS))] + [row["n"], row["total"]]
    return {
        "buckets": list(zip(TIME_TO_RECLAIM_BUCKETS, counts[:-2], strict=True)),
        "count": int(counts[-2]),
        "sum": float(counts[-1]),
    }
