"""Durable state in SQLite (WAL), shared by every gunicorn worker.

Every write is one short `BEGIN IMMEDIATE` transaction with `synchronous=FULL`, so a 2xx
answer to Alertmanager means the alerts are on disk. Cases change state only through
`transition()`, a compare-and-set on the row's version, so a snooze from the API and the
reconciler can never both win.
"""

from __future__ import annotations

import dataclasses
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
    freed_bytes INTEGER NOT NULL DEFAULT 0,
    created_mono REAL NOT NULL DEFAULT 0,
    term_mono   REAL,
    followup    INTEGER
);
-- One live case per process: the same key the identity check uses (Target.key).
CREATE UNIQUE INDEX IF NOT EXISTS one_live_case_per_target
    ON cases (node, boot_id, pid, start_ticks, uuid) WHERE live = 1;
CREATE INDEX IF NOT EXISTS cases_state ON cases (state);
CREATE INDEX IF NOT EXISTS cases_term ON cases (term_mono) WHERE term_mono IS NOT NULL;
CREATE INDEX IF NOT EXISTS cases_rearm ON cases (state, reason_code) WHERE followup IS NULL;
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
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires    REAL NOT NULL,  -- boot-time clock
    progressed REAL            -- when the holder last finished a tick (boot-time clock)
);
CREATE TABLE IF NOT EXISTS breaker (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    open      INTEGER NOT NULL,
    since     REAL,
    reason    TEXT NOT NULL DEFAULT ''
);
"""

# Case fields kept in their own columns (queried or indexed); every other field of the
# dataclass lives in the `data` JSON, so a new field needs no schema change.
_CASE_COLUMNS = (
    "id", "state", "version", "node", "pid", "start_time", "start_ticks", "boot_id", "uuid",
    "created", "updated", "term_at", "reason_code", "user", "freed_bytes", "created_mono",
    "term_mono", "followup",
)  # fmt: skip
_CASE_DATA_FIELDS = tuple(
    f.name for f in dataclasses.fields(Case) if f.name not in _CASE_COLUMNS and f.name != "members"
)


class LeaseLost(Exception):
    """This reconciler no longer holds the lease: it must not act (fencing)."""


@dataclass(frozen=True)
class Fence:
    """Proof a write may act: the lease holder, renewed in the same transaction."""

    holder: str
    mono: float
    ttl: float


class _Conflict(Exception):
    """The row's version moved: someone else changed the case first."""


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
    fields = {k: row[k] for k in _CASE_COLUMNS}
    fields["state"] = State(fields["state"])
    fields.update({k: data[k] for k in _CASE_DATA_FIELDS if k in data})
    return Case(members=members, **fields)


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
            # Created 0600 before SQLite opens it (its -wal and -shm files copy the mode).
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
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
            self._reset()
            raise StoreUnavailable(f"cannot write {self.path}: {exc}") from exc
        try:
            yield conn
        except BaseException as exc:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.IntegrityError):
                self._reset()
                raise StoreUnavailable(f"cannot write {self.path}: {exc}") from exc
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            self._reset()
            raise StoreUnavailable(f"cannot commit to {self.path}: {exc}") from exc

    def _reset(self) -> None:
        """Drop this thread's connection after a failure (a full disk, an I/O error): the
        next call opens a fresh one, so the service recovers by itself when space returns."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with suppress(sqlite3.Error):
                conn.close()

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            self._reset()
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

    def count(self, name: str, label: str = "") -> None:
        with self._tx() as conn:
            self._bump(conn, name, label)

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
                self._insert_case(conn, case, {"labels": ep.labels})
                conn.execute(
                    "UPDATE episodes SET processed = 1, case_id = ? "
                    "WHERE fingerprint = ? AND starts_at = ?",
                    (case.id, ep.fingerprint, ep.starts_at),
                )

    @staticmethod
    def _insert_case(conn: sqlite3.Connection, case: Case, evidence: dict[str, Any]) -> None:
        row = {k: getattr(case, k) for k in _CASE_COLUMNS if k != "id"}
        row["state"] = str(case.state)
        row["live"] = 1 if case.state in LIVE_STATES else 0
        row["data"] = _case_data(case)
        names = ", ".join(row)
        cur = conn.execute(
            f"INSERT INTO cases ({names}) VALUES ({', '.join('?' for _ in row)})",
            tuple(row.values()),
        )
        case.id = int(cur.lastrowid or 0)
        conn.execute(
            "INSERT INTO timeline (case_id, ts, state, reason, evidence) VALUES (?,?,?,?,?)",
            (case.id, case.created, str(case.state), case.reason, json.dumps(evidence)),
        )

    def rearm(self, old: Case, new: Case, fence: Fence) -> bool:
        """Start `new` for the target of the activity-cancelled `old`, moving old's firing
        episodes to it; False when old was re-armed already or a live case exists."""
        with self._tx() as conn:
            self._check_fence(conn, fence)
            claimed = conn.execute(
                "UPDATE cases SET followup = -1 WHERE id = ? AND followup IS NULL", (old.id,)
            )
            if claimed.rowcount != 1:
                return False
            try:
                self._insert_case(conn, new, {"rearmed_from": old.id})
            except sqlite3.IntegrityError:  # one live case per target already
                conn.execute("UPDATE cases SET followup = NULL WHERE id = ?", (old.id,))
                return False
            conn.execute("UPDATE cases SET followup = ? WHERE id = ?", (new.id, old.id))
            conn.execute(
                "UPDATE episodes SET case_id = ? WHERE case_id = ? AND status = 'firing'",
                (new.id, old.id),
            )
        old.followup = new.id
        return True

    def rearm_candidates(self, ended_before_mono: float, limit: int = 200) -> list[Case]:
        """Cases cancelled for activity, not re-armed yet, whose episodes still fire."""
        rows = self._read(
            "SELECT * FROM cases WHERE state = 'cancelled' AND reason_code = 'activity' "
            "AND followup IS NULL AND EXISTS (SELECT 1 FROM episodes "
            "WHERE episodes.case_id = cases.id AND episodes.status = 'firing') "
            "ORDER BY id LIMIT ?",
            (limit,),
        )
        cases = [_row_to_case(r) for r in rows]
        return [c for c in cases if c.ended_mono is not None and c.ended_mono <= ended_before_mono]

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

    @staticmethod
    def _check_fence(
        conn: sqlite3.Connection, fence: Fence | None, name: str = "reconciler"
    ) -> None:
        """Renew the lease in this transaction, or raise LeaseLost (the caller must not act)."""
        if fence is None:
            return
        cur = conn.execute(
            "UPDATE lease SET expires = ? WHERE name = ? AND holder = ? AND expires > ?",
            (fence.mono + fence.ttl, name, fence.holder, fence.mono),
        )
        if cur.rowcount != 1:
            raise LeaseLost(f"{fence.holder} no longer holds the {name} lease")

    def _update_case(self, conn: sqlite3.Connection, case: Case, old_version: int) -> bool:
        row = {k: getattr(case, k) for k in _CASE_COLUMNS if k not in ("id", "version")}
        row["state"] = str(case.state)
        row["live"] = 1 if case.state in LIVE_STATES else 0
        row["data"] = _case_data(case)
        assignments = ", ".join(f"{k} = ?" for k in row)
        cur = conn.execute(
            f"UPDATE cases SET {assignments}, version = version + 1 WHERE id = ? AND version = ?",
            (*row.values(), case.id, old_version),
        )
        return cur.rowcount == 1

    def transition(
        self,
        case: Case,
        new_state: State,
        *,
        reason: str,
        evidence: dict[str, Any],
        now: float,
        reason_code: str = "",
        mono: float | None = None,
        fence: Fence | None = None,
    ) -> Case | None:
        """Compare-and-set the case to `new_state`; None when someone else changed it first.
        With a `fence`, raise LeaseLost (changing nothing) unless we still hold the lease.

        The caller has already updated the case's other fields (timestamps, samples).
        """
        old_version = case.version
        saved = (case.state, case.reason, case.reason_code, case.updated, case.ended_at,
                 case.ended_mono)  # fmt: skip
        case.state = new_state
        case.reason = reason
        case.reason_code = reason_code
        case.updated = now
        if new_state not in LIVE_STATES and case.ended_at is None:
            case.ended_at = now
            case.ended_mono = mono
        try:
            with self._tx() as conn:
                self._check_fence(conn, fence)
                if not self._update_case(conn, case, old_version):
                    raise _Conflict
                conn.execute(
                    "INSERT INTO timeline (case_id, ts, state, reason, evidence) "
                    "VALUES (?,?,?,?,?)",
                    (case.id, now, str(new_state), reason, json.dumps(evidence, default=str)),
                )
        except _Conflict:
            (case.state, case.reason, case.reason_code, case.updated, case.ended_at,
             case.ended_mono) = saved  # fmt: skip
            return None
        except BaseException:
            (case.state, case.reason, case.reason_code, case.updated, case.ended_at,
             case.ended_mono) = saved  # fmt: skip
            raise
        case.version = old_version + 1
        return case

    def save_samples(self, case: Case, fence: Fence | None = None) -> bool:
        """Persist live samples and timestamps without a state change (CAS on version)."""
        with self._tx() as conn:
            self._check_fence(conn, fence)
            if not self._update_case(conn, case, case.version):
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

    def terminations_since(self, since_mono: float, boot_id: str, node: str | None = None) -> int:
        """SIGTERMs sent since `since_mono` (boot-time clock of this boot)."""
        sql = "SELECT COUNT(*) AS n FROM cases WHERE term_mono >= ? AND boot_id = ?"
        params: tuple[Any, ...] = (since_mono, boot_id)
        if node is not None:
            sql += " AND node = ?"
            params += (node,)
        return int(self._read(sql, params)[0]["n"])

    def flagged_since(self, since_mono: float, node: str) -> int:
        rows = self._read(
            "SELECT COUNT(DISTINCT pid || ':' || start_ticks) AS n FROM cases "
            "WHERE created_mono >= ? AND node = ?",
            (since_mono, node),
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

    def mark_progress(self, holder: str, mono: float, name: str = "reconciler") -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE lease SET progressed = ? WHERE name = ? AND holder = ?",
                (mono, name, holder),
            )

    def progress(self, name: str = "reconciler") -> tuple[str, float, float | None] | None:
        """(holder, expires, progressed) of the lease, or None before any reconciler ran."""
        rows = self._read("SELECT holder, expires, progressed FROM lease WHERE name = ?", (name,))
        if not rows:
            return None
        return rows[0]["holder"], rows[0]["expires"], rows[0]["progressed"]

    def prune(self, before: float, batch: int = 5000) -> int:
        """Delete ended cases last changed before `before` (wall time) with their timeline
        and signals, and processed episodes not seen since then; returns cases deleted."""
        with self._tx() as conn:
            ids = [
                r["id"]
                for r in conn.execute(
                    "SELECT id FROM cases WHERE live = 0 AND updated < ? LIMIT ?", (before, batch)
                )
            ]
            marks = ",".join("?" for _ in ids)
            if ids:
                for table, column in (("timeline", "case_id"), ("signals", "case_id"),
                                      ("cases", "id")):  # fmt: skip
                    conn.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", ids)
            conn.execute(
                "DELETE FROM episodes WHERE processed = 1 AND last_seen < ? AND (case_id IS NULL "
                "OR case_id NOT IN (SELECT id FROM cases))",
                (before,),
            )
        return len(ids)

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
