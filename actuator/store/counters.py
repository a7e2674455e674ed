"""Counters (webhook requests, rejected alerts) and the one-read snapshot /metrics serves."""

from __future__ import annotations

import sqlite3
from contextlib import suppress
from typing import Any

from actuator.store.database import Database, StoreUnavailable


def bump(conn: sqlite3.Connection, name: str, label: str, by: int = 1) -> None:
    conn.execute(
        "INSERT INTO counters (name, label, value) VALUES (?, ?, ?) "
        "ON CONFLICT (name, label) DO UPDATE SET value = value + excluded.value",
        (name, label, by),
    )


class CounterQueries(Database):
    def count(self, name: str, label: str = "") -> None:
        with self._tx() as conn:
            bump(conn, name, label)

    def count_request(self, code: int) -> None:
        with self._tx() as conn:
            bump(conn, "webhook_requests", str(code))

    def metric_snapshot(self) -> dict[str, Any]:
        """Everything /metrics needs, in one read transaction."""
        conn = self._conn()
        try:
            conn.execute("BEGIN")
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
            rejected = conn.execute(
                "SELECT COALESCE(SUM(value), 0) AS n FROM counters WHERE name = 'alerts_rejected'"
            ).fetchone()
            breaker = conn.execute("SELECT open FROM breaker WHERE id = 1").fetchone()
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise StoreUnavailable(f"cannot read {self.path}: {exc}") from exc
        return {
            "states": states,
            "freed_bytes": int(freed["b"]),
            "refusals": refusals,
            "signals": signals,
            "requests": requests,
            "alerts_rejected": int(rejected["n"]),
            "breaker_open": bool(breaker["open"]) if breaker else False,
        }
