"""The SQLite mechanics under every query (actuator/store/database.py): a transaction is all
or nothing, durability settings hold on every connection, each thread has its own, an older
database is refused by name, and a store that cannot be opened says so as StoreUnavailable
(the service answers 503 and retries), never as a raw sqlite3 error."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from actuator.store import Store
from actuator.store.database import SCHEMA_VERSION, WAL_PAGES, StoreUnavailable


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "db.sqlite")
    store.init()
    return store


def _counters(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return sorted(r[0] for r in conn.execute("SELECT name FROM counters"))


def test_a_transaction_that_fails_leaves_nothing_behind(store: Store, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="half way"), store._tx() as conn:
        conn.execute("INSERT INTO counters (name, label, value) VALUES ('half', '', 1)")
        raise RuntimeError("half way")
    assert _counters(tmp_path / "db.sqlite") == []
    store.count("whole")  # the same connection goes on working
    assert _counters(tmp_path / "db.sqlite") == ["whole"]


def test_every_connection_is_durable_and_keeps_its_log_small(store: Store) -> None:
    conn = store._conn()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == WAL_PAGES
    assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == WAL_PAGES * 4096
    assert (Path(store.path).stat().st_mode & 0o777) == 0o600  # cases name users and PIDs


def test_each_thread_has_its_own_connection(store: Store) -> None:
    seen: list[sqlite3.Connection] = []
    thread = threading.Thread(target=lambda: seen.append(store._conn()))
    thread.start()
    thread.join()
    assert seen[0] is not store._conn() and store._conn() is store._conn()


def test_a_database_from_an_older_release_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE cases (id INTEGER PRIMARY KEY)")
        conn.execute("PRAGMA user_version = 1")
    with pytest.raises(StoreUnavailable, match=f"schema 1, this one needs {SCHEMA_VERSION}"):
        Store(path).init()
    with sqlite3.connect(path) as conn:  # and left as it was: moved aside by a person
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1


def test_init_is_idempotent(store: Store, tmp_path: Path) -> None:
    store.count("kept")
    store.init()
    Store(tmp_path / "db.sqlite").init()
    assert _counters(tmp_path / "db.sqlite") == ["kept"]


@pytest.mark.parametrize("broken", ["a directory", "not a database"])
def test_a_store_that_cannot_be_opened_is_unavailable(tmp_path: Path, broken: str) -> None:
    path = tmp_path / "db.sqlite"
    if broken == "a directory":
        path.mkdir()
    else:
        path.write_bytes(b"this is not SQLite" * 512)
        path.chmod(0o600)
    store = Store(path)
    with pytest.raises(StoreUnavailable, match=str(path)):
        store.init()
    with pytest.raises(StoreUnavailable):
        store.ping()
