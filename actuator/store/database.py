"""The database mechanics: one SQLite (WAL) connection per thread and process, short
`BEGIN IMMEDIATE` transactions with `synchronous=FULL`, the schema, and recovery after a
failed write. The domain queries (the other modules of this package) build on it, in SQL
both SQLite and PostgreSQL run (postgres.py holds the other mechanics)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from importlib.resources import files
from typing import Any, Protocol

from actuator.clock import boottime
from actuator.private_files import create_private
from exporter import procfs

SCHEMA_VERSION = 2  # 2: process identity is (boot_id, start_ticks)
Row = Any  # a row by column name: sqlite3.Row, or psycopg's dict_row


class Conn(Protocol):
    """What the queries use of a connection (sqlite3's, or postgres.py's adapter)."""

    def execute(self, sql: str, params: Any = ...) -> Any: ...


def rowcounts(conn: Conn, sql: str, rows: Sequence[Sequence[Any]]) -> list[int]:
    """One statement run for each of `rows`, in order, and the rows each changed. On
    PostgreSQL they go in one round trip (postgres.py's adapter pipelines them), where one
    each made a node's batch of 24 decisions 48 round trips under the writers' lock."""
    each = getattr(conn, "rowcounts", None)
    if each is not None:
        return list(each(sql, rows))
    return [conn.execute(sql, row).rowcount for row in rows]


def _on_both_backends(name: str) -> tuple[type[Exception], ...]:
    """sqlite3's exception class `name`, and psycopg's where it is installed."""
    errors: list[type[Exception]] = [getattr(sqlite3, name)]
    with suppress(ImportError):
        import psycopg

        errors.append(getattr(psycopg, name))
    return tuple(errors)


# A unique constraint said no, on either backend.
DUPLICATE = _on_both_backends("IntegrityError")
# The database failed (not one statement's input): the transaction fails as a whole.
DATABASE_ERRORS = _on_both_backends("Error")
# The write-ahead log is checkpointed every WAL_PAGES pages and cut back to that size, so
# it never holds more than about 400 KiB: on a small volume the log itself must not take
# the space a full disk needs to recover (SQLite's default lets it grow to 4 MiB and keep it).
WAL_PAGES = 100


def schema() -> str:
    return files("actuator.store").joinpath("schema.sql").read_text(encoding="utf-8")


class StoreUnavailable(Exception):
    """The database cannot be opened or written (answer 503, retry later)."""


# How long a failed write keeps `/-/ready` at 503: several reconciler ticks, so a worker
# whose commits fail says so however its writes interleave with ones that still succeed.
WRITE_FAILURE_HOLD_S = 15.0


class WriterTurn:
    """Whose turn it is to write the database: this process's writers queue on a lock, and
    the host's processes (gunicorn's workers) on an flock of a file beside the database,
    tried every half millisecond. Left to SQLite alone, a writer that finds the database
    locked sleeps in steps of up to 100 ms (its busy handler) however soon it is free: in
    a storm a webhook's commit waited hundreds of ms behind the reconciler's short
    transactions. Only a faster queue: SQLite's own locking still keeps writes apart, so a
    lock file that cannot be opened leaves the turn to SQLite."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path, self.timeout = path, timeout
        self._threads = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._pid = -1
        _TURNS.add(self)

    def _forked(self) -> None:
        """In a child: a writer of the parent's that held the turn at fork() is not here."""
        self._threads, self._depth = threading.RLock(), 0
        if self._fd is not None:
            with suppress(OSError):
                os.close(self._fd)  # the parent's own descriptor still holds its flock
        self._fd, self._pid = None, -1

    def _file(self) -> int | None:
        if self._pid != os.getpid():  # a child shares its parent's flock: its own file
            self._pid, self._fd = os.getpid(), None
            try:
                flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW  # never a link
                self._fd = os.open(self.path, flags, 0o600)
            except OSError:
                self._fd = None
        return self._fd

    def acquire(self) -> bool:
        deadline = time.monotonic() + self.timeout
        if not self._threads.acquire(timeout=self.timeout):
            return False
        fd = self._file() if self._depth == 0 else None
        while fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self._threads.release()
                    return False
                time.sleep(0.0005)
            except OSError:
                break  # not lockable here: SQLite's own locking decides
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None and self._pid == os.getpid():
            with suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()


_TURNS: weakref.WeakSet[WriterTurn] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for turn in list(_TURNS):
        turn._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Database:
    _write_failed_at = float("-inf")  # time.monotonic() of the last write that failed
    _write_failure = ""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 5.0) -> None:
        self.path = str(path)
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._pid = os.getpid()
        self._writer = WriterTurn(self.path + ".writer", busy_timeout)
        # The clock every stored wait (`*_mono`) is measured on, and its domain: one host's
        # boot-time clock, valid within this boot only.
        self.mono = boottime
        self.clock_id = f"boot:{procfs.boot_id()}"

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._pid == os.getpid():
            return conn
        self._pid = os.getpid()  # never reuse a connection across fork()
        try:
            create_private(self.path)
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit={WAL_PAGES * 4096}")
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"cannot open {self.path}: {exc}") from exc
        self._local.conn = conn
        return conn

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """A write transaction; a failure to write is remembered for readiness."""
        try:
            with self._transaction() as conn:
                yield conn
        except StoreUnavailable as exc:
            self._write_failed_at, self._write_failure = time.monotonic(), str(exc)
            raise

    def write_problem(self) -> str | None:
        """Why this process cannot commit now: a write failed within WRITE_FAILURE_HOLD_S
        (every webhook and reconciler commit writes through `_tx`); None otherwise."""
        if time.monotonic() - self._write_failed_at > WRITE_FAILURE_HOLD_S:
            return None
        return f"the store could not commit: {self._write_failure}"

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        if not self._writer.acquire():
            raise StoreUnavailable(
                f"cannot write {self.path}: waited {self.busy_timeout:g}s for the writer's turn"
            )
        try:
            with self._one_writer() as conn:
                yield conn
        finally:
            self._writer.release()

    @contextmanager
    def _one_writer(self) -> Iterator[sqlite3.Connection]:
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
        next call opens a fresh one, so the service recovers by itself when space returns.
        Nothing else is done on a full disk: the log is already capped (WAL_PAGES), and
        truncating it here only handed its space to whichever writer came next, so a full
        volume was full one moment and not the next."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with suppress(sqlite3.Error):
                conn.close()

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """Several reads that see one state of the database."""
        conn = self._conn()
        try:
            conn.execute("BEGIN")
            yield conn
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise StoreUnavailable(f"cannot read {self.path}: {exc}") from exc

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
                for statement in schema().split(";"):
                    if statement.strip():
                        conn.execute(statement)
                columns = {r["name"] for r in conn.execute("PRAGMA table_info(cases)")}
                if "clock" not in columns:  # added after schema 2: a column, no new version
                    conn.execute("ALTER TABLE cases ADD COLUMN clock TEXT NOT NULL DEFAULT ''")
                if "members" not in columns:  # likewise; NULL: the members are in data
                    conn.execute("ALTER TABLE cases ADD COLUMN members TEXT")
                conn.execute(
                    "INSERT INTO breaker (id, open) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
                )
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot initialise {self.path}: {exc}") from exc

    def ping(self) -> None:
        self._read("SELECT 1")
