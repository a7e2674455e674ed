"""Durable state in SQLite (WAL), shared by every gunicorn worker.

Every write is one short `BEGIN IMMEDIATE` transaction with `synchronous=FULL`, so a 2xx
answer to Alertmanager means the alerts are on disk. Cases change state only through
`transition()`, a compare-and-set on the row's version, so a snooze from the API and the
reconciler can never both win.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actuator.models import (
    LIVE_STATES,
    AlertmanagerAlert,
    Case,
    Member,
    State,
    Target,
    epoch,
    is_reclaimable,
    is_zero_time,
)

SCHEMA_VERSION = 2  # 2: process identity is (boot_id, start_ticks)
SCHEMA = """
CREATE TABLE IF NOT EXISTS episodes (
    fingerprint TEXT NOT NULL,
    starts_at   TEXT NOT NULL,
    starts_ts   REAL NOT NULL,
    alertname   TEXT NOT NULL,
    labels      TEXT NOT NULL,
    annotations TEXT NOT NULL,
    status      TEXT NOT NULL,
    ends_ts     REAL,
    first_seen  REAL NOT NULL,
    last_seen   REAL NOT NULL,
    deliveries  INTEGER NOT NULL DEFAULT 1,
    processed   INTEGER NOT NULL DEFAULT 0,
    case_id     INTEGER,
    PRIMARY KEY (fingerprint, starts_at)
);
CREATE INDEX IF NOT EXISTS episodes_todo ON episodes (processed) WHERE processed = 0;
CREATE INDEX IF NOT EXISTS episodes_case ON episodes (case_id);
CREATE TABLE IF NOT EXISTS cases (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    state       TEXT NOT NULL,
    live        INTEGER NOT NULL,
    version     INTEGER NOT NULL DEFAULT 0,
    node        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    start_time  REAL NOT NULL,
    start_ticks INTEGER NOT NULL,
    boot_id     TEXT NOT NULL,
    uuid        TEXT NOT NULL,
    data        TEXT NOT NULL,
    created     REAL NOT NULL,
    updated     REAL NOT NULL,
    term_at     REAL,
    reason_code TEXT NOT NULL DEFAULT '',
    user        TEXT,
    freed_bytes INTEGER NOT NULL DEFAULT 0
);
-- One live case per process: the same key the identity check uses (Target.key).
CREATE UNIQUE INDEX IF NOT EXISTS one_live_case_per_target
    ON cases (node, boot_id, pid, start_ticks, uuid) WHERE live = 1;
CREATE INDEX IF NOT EXISTS cases_state ON cases (state);
CREATE INDEX IF NOT EXISTS cases_term ON cases (term_at) WHERE term_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS timeline (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id  INTEGER NOT NULL,
    ts       REAL NOT NULL,
    state    TEXT NOT NULL,
    reason   TEXT NOT NULL,
    evidence TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS timeline_case ON timeline (case_id);
CREATE TABLE IF NOT EXISTS signals (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id INTEGER NOT NULL,
    ts      REAL NOT NULL,
    pid     INTEGER NOT NULL,
    signal  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT NOT NULL,
    label TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (name, label)
);
CREATE TABLE IF NOT EXISTS lease (
    name    TEXT PRIMARY KEY,
    holder  TEXT NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS breaker (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    open      INTEGER NOT NULL,
    since     REAL,
    reason    TEXT NOT NULL DEFAULT ''
);
"""

_CASE_DATA_FIELDS = (
    "alertname",
    "fingerprint",
    "starts_ts",
    "labels",
    "annotations",
    "reason",
    "uid",
    "project",
    "rule",
    "mode",
    "notified_at",
    "kill_at",
    "exited_at",
    "ended_at",
    "snoozed_until",
    "cpu_seconds",
    "cpu_at",
    "cpu_rate",
    "effective",
    "gpu_memory_bytes",
)


class StoreUnavailable(Exception):
    """The database cannot be opened or written (answer 503, retry later)."""


@dataclass(frozen=True)
class Ingest:
    received: int
    recorded: int
    ignored: int
    rejected: int = 0


@dataclass(frozen=True)
class Episode:
    fingerprint: str
    starts_at: str
    starts_ts: float
    alertname: str
    labels: dict[str, str]
    annotations: dict[str, str]
    status: str
    ends_ts: float | None
    case_id: int | None


def _row_to_case(row: sqlite3.Row) -> Case:
    data = json.loads(row["data"])
    members = [Member(**m) for m in data.pop("members", [])]
    return Case(
        id=row["id"],
        state=State(row["state"]),
        version=row["version"],
        node=row["node"],
        pid=row["pid"],
        start_time=row["start_time"],
        start_ticks=row["start_ticks"],
        boot_id=row["boot_id"],
        uuid=row["uuid"],
        created=row["created"],
        updated=row["updated"],
        term_at=row["term_at"],
        reason_code=row["reason_code"],
        user=row["user"],
        freed_bytes=row["freed_bytes"],
        members=members,
        **{k: data.get(k) for k in _CASE_DATA_FIELDS},
    )


def _case_data(case: Case) -> str:
    data: dict[str, Any] = {k: getattr(case, k) for k in _CASE_DATA_FIELDS}
    data["members"] = [m.__dict__ for m in case.members]
    return json.dumps(data, separators=(",", ":"))


class Store:
    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 5.0) -> None:
        self.path = str(path)
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._pid = os.getpid()

    # -- connections -------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._pid == os.getpid():
            return conn
        self._pid = os.getpid()  # never reuse a connection across fork()
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"cannot open {self.path}: {exc}") from exc
        self._local.conn = conn
        return conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot write {self.path}: {exc}") from exc
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot commit to {self.path}: {exc}") from exc

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot read {self.path}: {exc}") from exc

    def init(self) -> None:
        try:
            with self._tx() as conn:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                has_cases = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cases'"
                ).fetchone()
                if has_cases and version < SCHEMA_VERSION:
                    raise StoreUnavailable(
                        f"{self.path} was written by an older gpu-reclaimer (schema "
                        f"{version}, this one needs {SCHEMA_VERSION}): move it aside; a new "
                        "database is created at start"
                    )
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("INSERT OR IGNORE INTO breaker (id, open) VALUES (1, 0)")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot initialise {self.path}: {exc}") from exc

    def ping(self) -> None:
        self._read("SELECT 1")

    # -- webhook -----------------------------------------------------------------------

    def record_alerts(self, alerts: list[AlertmanagerAlert], rejected: int, now: float) -> Ingest:
        """Upsert every reclaimable alert as an episode; idempotent and order-independent.

        `resolved` is sticky: once any delivery said an episode resolved, it stays resolved,
        so a late or duplicated `firing` copy can never revive it.
        """
        recorded = ignored = 0
        with self._tx() as conn:
            for alert in alerts:
                if not is_reclaimable(alert):
                    ignored += 1
                    continue
                ends = None if is_zero_time(alert.endsAt) else epoch(alert.endsAt)  # type: ignore[arg-type]
                starts_ts = epoch(alert.startsAt)
                conn.execute(
                    """
                    INSERT INTO episodes (fingerprint, starts_at, starts_ts, alertname, labels,
                        annotations, status, ends_ts, first_seen, last_seen)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (fingerprint, starts_at) DO UPDATE SET
                        status = CASE WHEN episodes.status = 'resolved' OR
                                 excluded.status = 'resolved' THEN 'resolved' ELSE 'firing' END,
                        ends_ts = COALESCE(excluded.ends_ts, episodes.ends_ts),
                        last_seen = excluded.last_seen,
                        deliveries = episodes.deliveries + 1,
                        processed = CASE WHEN episodes.status = 'firing' AND
                                    excluded.status = 'resolved' THEN 0 ELSE episodes.processed END
                    """,
                    (
                        alert.fingerprint,
                        repr(starts_ts),
                        starts_ts,
                        alert.labels.get("alertname", ""),
                        json.dumps(alert.labels, sort_keys=True),
                        json.dumps(alert.annotations, sort_keys=True),
                        alert.status,
                        ends,
                        now,
                        now,
                    ),
                )
                recorded += 1
            self._bump(conn, "webhook_requests", "200")
            if rejected:
                self._bump(conn, "alerts_rejected", "", rejected)
        return Ingest(
            received=len(alerts) + rejected, recorded=recorded, ignored=ignored, rejected=rejected
        )

    def count_request(self, code: int) -> None:
        with self._tx() as conn:
            self._bump(conn, "webhook_requests", str(code))

    @staticmethod
    def _bump(conn: sqlite3.Connection, name: str, label: str, by: int = 1) -> None:
        conn.execute(
            "INSERT INTO counters (name, label, value) VALUES (?, ?, ?) "
            "ON CONFLICT (name, label) DO UPDATE SET value = value + excluded.value",
            (name, label, by),
        )

    # -- episodes -> cases -------------------------------------------------------------

    def pending_episodes(self, limit: int = 500) -> list[Episode]:
        rows = self._read(
            "SELECT * FROM episodes WHERE processed = 0 ORDER BY first_seen LIMIT ?", (limit,)
        )
        return [
            Episode(
                fingerprint=r["fingerprint"],
                starts_at=r["starts_at"],
                starts_ts=r["starts_ts"],
                alertname=r["alertname"],
                labels=json.loads(r["labels"]),
                annotations=json.loads(r["annotations"]),
                status=r["status"],
                ends_ts=r["ends_ts"],
                case_id=r["case_id"],
            )
            for r in rows
        ]

    def mark_episode(self, ep: Episode, case_id: int | None) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE episodes SET processed = 1, case_id = COALESCE(?, case_id) "
                "WHERE fingerprint = ? AND starts_at = ?",
                (case_id, ep.fingerprint, ep.starts_at),
            )

    def live_case_for(self, target: Target) -> Case | None:
        rows = self._read(
            "SELECT * FROM cases WHERE live = 1 AND node = ? AND boot_id = ? AND pid = ? "
            "AND start_ticks = ? AND uuid = ?",
            target.key,
        )
        return _row_to_case(rows[0]) if rows else None

    def ingest_batch(
        self, marks: list[tuple[Episode, int | None]], new: list[tuple[Case, Episode]]
    ) -> None:
        """Mark episodes processed and create cases for others, in one transaction."""
        with self._tx() as conn:
            for ep, case_id in marks:
                conn.execute(
                    "UPDATE episodes SET processed = 1, case_id = COALESCE(?, case_id) "
                    "WHERE fingerprint = ? AND starts_at = ?",
                    (case_id, ep.fingerprint, ep.starts_at),
                )
            for case, ep in new:
                self._insert_case(conn, case, ep, {"labels": ep.labels})

    def create_case(self, case: Case, ep: Episode, evidence: dict[str, Any]) -> Case:
        """Insert a case for an episode and mark the episode processed, atomically."""
        with self._tx() as conn:
            self._insert_case(conn, case, ep, evidence)
        return case

    @staticmethod
    def _insert_case(
        conn: sqlite3.Connection, case: Case, ep: Episode, evidence: dict[str, Any]
    ) -> None:
        live = 1 if case.state in LIVE_STATES else 0
        cur = conn.execute(
            "INSERT INTO cases (state, live, node, pid, start_time, start_ticks, boot_id, uuid, "
            "data, created, updated, reason_code, user) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                str(case.state),
                live,
                case.node,
                case.pid,
                case.start_time,
                case.start_ticks,
                case.boot_id,
                case.uuid,
                _case_data(case),
                case.created,
                case.updated,
                case.reason_code,
                case.user,
            ),
        )
        case.id = int(cur.lastrowid or 0)
        conn.execute(
            "INSERT INTO timeline (case_id, ts, state, reason, evidence) VALUES (?,?,?,?,?)",
            (case.id, case.created, str(case.state), case.reason, json.dumps(evidence)),
        )
        conn.execute(
            "UPDATE episodes SET processed = 1, case_id = ? "
            "WHERE fingerprint = ? AND starts_at = ?",
            (case.id, ep.fingerprint, ep.starts_at),
        )

    def unresolved_episodes(self, case_id: int) -> int:
        rows = self._read(
            "SELECT COUNT(*) AS n FROM episodes WHERE case_id = ? AND status = 'firing'",
            (case_id,),
        )
        return int(rows[0]["n"])

    # -- cases -------------------------------------------------------------------------

    def get_case(self, case_id: int) -> Case | None:
        rows = self._read("SELECT * FROM cases WHERE id = ?", (case_id,))
        return _row_to_case(rows[0]) if rows else None

    def live_cases(self) -> list[Case]:
        return [_row_to_case(r) for r in self._read("SELECT * FROM cases WHERE live = 1")]

    def list_cases(
        self,
        *,
        state: str | None = None,
        node: str | None = None,
        user: str | None = None,
        limit: int = 100,
    ) -> list[Case]:
        sql = "SELECT * FROM cases WHERE 1 = 1"
        params: list[Any] = []
        for column, value in (("state", state), ("node", node), ("user", user)):
            if value is not None:
                sql += f" AND {column} = ?"
                params.append(value)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
        return [_row_to_case(r) for r in self._read(sql, tuple(params))]

    def timeline(self, case_id: int) -> list[dict[str, Any]]:
        rows = self._read("SELECT * FROM timeline WHERE case_id = ? ORDER BY id", (case_id,))
        return [
            {
                "ts": r["ts"],
                "state": r["state"],
                "reason": r["reason"],
                "evidence": json.loads(r["evidence"]),
            }
            for r in rows
        ]

    def transition(
        self,
        case: Case,
        new_state: State,
        *,
        reason: str,
        evidence: dict[str, Any],
        now: float,
        reason_code: str = "",
    ) -> Case | None:
        """Compare-and-set the case to `new_state`; None when someone else changed it first.

        The caller has already updated the case's other fields (timestamps, samples).
        """
        old_version = case.version
        case.state = new_state
        case.reason = reason
        case.reason_code = reason_code
        case.updated = now
        if new_state not in LIVE_STATES and case.ended_at is None:
            case.ended_at = now
        with self._tx() as conn:
            cur = conn.execute(
                "UPDATE cases SET state = ?, live = ?, version = version + 1, data = ?, "
                "updated = ?, term_at = ?, reason_code = ?, user = ?, freed_bytes = ? "
                "WHERE id = ? AND version = ?",
                (
                    str(new_state),
                    1 if new_state in LIVE_STATES else 0,
                    _case_data(case),
                    now,
                    case.term_at,
                    reason_code,
                    case.user,
                    case.freed_bytes,
                    case.id,
                    old_version,
                ),
            )
            if cur.rowcount != 1:
                return None
            conn.execute(
                "INSERT INTO timeline (case_id, ts, state, reason, evidence) VALUES (?,?,?,?,?)",
                (case.id, now, str(new_state), reason, json.dumps(evidence, default=str)),
            )
        case.version = old_version + 1
        return case

    def save_samples(self, case: Case) -> bool:
        """Persist live samples (CPU time, memory) without a state change (CAS on version)."""
        with self._tx() as conn:
            cur = conn.execute(
                "UPDATE cases SET version = version + 1, data = ?, user = ? "
                "WHERE id = ? AND version = ?",
                (_case_data(case), case.user, case.id, case.version),
            )
            if cur.rowcount != 1:
                return False
        case.version += 1
        return True

    def record_signal(self, case_id: int, pid: int, signal_name: str, now: float) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO signals (case_id, ts, pid, signal) VALUES (?, ?, ?, ?)",
                (case_id, now, pid, signal_name),
            )

    def signals_for(self, case_id: int) -> list[dict[str, Any]]:
        rows = self._read("SELECT * FROM signals WHERE case_id = ? ORDER BY id", (case_id,))
        return [{"ts": r["ts"], "pid": r["pid"], "signal": r["signal"]} for r in rows]

    # -- limits and breaker ------------------------------------------------------------

    def terminations_since(self, since: float, node: str | None = None) -> int:
        if node is None:
            rows = self._read("SELECT COUNT(*) AS n FROM cases WHERE term_at >= ?", (since,))
        else:
            rows = self._read(
                "SELECT COUNT(*) AS n FROM cases WHERE term_at >= ? AND node = ?", (since, node)
            )
        return int(rows[0]["n"])

    def flagged_since(self, since: float, node: str) -> int:
        rows = self._read(
            "SELECT COUNT(DISTINCT pid || ':' || start_ticks) AS n FROM cases "
            "WHERE created >= ? AND node = ?",
            (since, node),
        )
        return int(rows[0]["n"])

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

    # -- reconciler lease --------------------------------------------------------------

    def acquire_lease(self, holder: str, now: float, ttl: float, name: str = "reconciler") -> bool:
        """Take or renew the lease; exactly one holder at a time across all workers."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO lease (name, holder, expires) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                "expires = excluded.expires WHERE lease.holder = excluded.holder "
                "OR lease.expires < ?",
                (name, holder, now + ttl, now),
            )
            row = conn.execute("SELECT holder FROM lease WHERE name = ?", (name,)).fetchone()
        return row is not None and row["holder"] == holder

    def release_lease(self, holder: str, name: str = "reconciler") -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM lease WHERE name = ? AND holder = ?", (name, holder))

    # -- metrics -----------------------------------------------------------------------

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
