"""Whose turn it is to write SQLite (actuator/store/database.py `WriterTurn`): another
process's writer (a real one) waits while this one writes and goes as soon as it commits,
not at SQLite's next busy-handler step; a writer that waits longer than the store's busy
timeout gets a clear error and writes nothing; and a lock file that cannot be made leaves
the turn to SQLite's own locking, the writes still made."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from actuator.store import Store, StoreUnavailable
from actuator.store.database import Database, WriterTurn

REPO = Path(__file__).resolve().parents[3]


def _other_writer(db: Path) -> subprocess.Popen[str]:
    """A second process that writes one row as soon as it can and says when it started
    waiting and when its commit was done."""
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from actuator.store.database import Database, WriterTurn
        db = Database({str(db)!r})
        print("waiting", time.monotonic(), flush=True)
        with db._tx() as conn:
            conn.execute("INSERT INTO counters (name, label, value) VALUES ('other', '', 1)")
        print("done", time.monotonic(), flush=True)
        """
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_another_process_s_writer_goes_as_soon_as_this_one_commits(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite")
    store.init()
    db = Database(tmp_path / "db.sqlite")
    with db._tx() as conn:
        other = _other_writer(tmp_path / "db.sqlite")
        assert other.stdout is not None
        word, since = other.stdout.readline().split()
        assert word == "waiting"
        conn.execute("INSERT INTO counters (name, label, value) VALUES ('this', '', 1)")
        # Held 335 ms from its first try: SQLite's busy handler would next look at 428 ms
        # (its steps: ... 228, 328, 428), 90 ms after this commit.
        time.sleep(max(0.0, float(since) + 0.335 - time.monotonic()))
        committed = time.monotonic()
    done = float(other.stdout.readline().split()[1])
    assert other.wait(timeout=10) == 0
    assert committed <= done < committed + 0.06  # its turn came at once, not a step later
    rows = db._read("SELECT name FROM counters WHERE name IN ('this', 'other') ORDER BY name")
    assert [r["name"] for r in rows] == ["other", "this"]


def test_a_writer_that_waits_past_the_busy_timeout_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    Store(tmp_path / "db.sqlite").init()
    holder = Database(tmp_path / "db.sqlite")
    impatient = Database(tmp_path / "db.sqlite", busy_timeout=0.2)
    with holder._tx():
        other = subprocess.run(  # another process: the file lock, not this one's threads
            [
                sys.executable,
                "-c",
                "import sys; sys.path.insert(0, sys.argv[1]);"
                "from actuator.store.database import Database;"
                "db = Database(sys.argv[2], busy_timeout=0.2)\n"
                "try:\n"
                "    with db._tx() as c:\n"
                '        c.execute("INSERT INTO counters (name, label, value) "\n'
                "                  \"VALUES ('x', '', 1)\")\n"
                "except Exception as e: print(type(e).__name__, e)",
                str(REPO),
                str(tmp_path / "db.sqlite"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert "StoreUnavailable" in other.stdout and "writer's turn" in other.stdout, other
    assert impatient._read("SELECT count(*) AS n FROM counters WHERE name = 'x'")[0]["n"] == 0


@pytest.mark.parametrize("planted", ["directory", "link"])
def test_without_a_lock_file_the_turn_is_sqlite_s_and_the_writes_are_made(
    tmp_path: Path, planted: str
) -> None:
    """A directory, or a link to a file elsewhere, where the lock file goes: not opened (a
    link is never followed, so nothing is created or locked through it)."""
    lock = tmp_path / "db.sqlite.writer"
    if planted == "directory":
        lock.mkdir()
    else:
        lock.symlink_to(tmp_path / "elsewhere")
    Store(tmp_path / "db.sqlite").init()
    db = Database(tmp_path / "db.sqlite")
    with db._tx() as conn:
        conn.execute("INSERT INTO counters (name, label, value) VALUES ('made', '', 1)")
    assert db._read("SELECT value FROM counters WHERE name = 'made'")[0]["value"] == 1
    assert not (tmp_path / "elsewhere").exists()
    with pytest.raises(StoreUnavailable), db._tx() as conn:  # a failed write is still one
        conn.execute("INSERT INTO no_such_table VALUES (1)")


def test_a_child_forked_while_a_writer_holds_the_turn_gets_its_own_turn(tmp_path: Path) -> None:
    """gunicorn forks its workers: a thread of the parent that held the turn at fork() does
    not exist in the child, whose writer must not wait on it until the timeout. (The turn
    alone: SQLite itself must not be forked mid-transaction, and is not.)"""
    turn = WriterTurn(str(tmp_path / "db.sqlite.writer"), timeout=3.0)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        assert turn.acquire()
        holding.set()
        release.wait(10)
        turn.release()

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: its turn comes once the parent's writer is done
        started = time.monotonic()
        got = turn.acquire()
        os._exit(0 if got and time.monotonic() - started < 2.0 else 1)
    time.sleep(0.3)
    release.set()
    holder.join(10)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
