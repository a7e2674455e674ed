"""The store on both backends (SQLite, a real PostgreSQL): idempotent ingest, concurrency,
the reconciler lease."""

from __future__ import annotations

import threading

import pytest

from actuator.models import AlertmanagerAlert, State
from actuator.store import Store, open_store
from actuator.store.cases import insert_case
from tests.helpers.api import alert, body


def payload(*alerts):
    return [AlertmanagerAlert.model_validate(a) for a in body(*alerts)["alerts"]]


@pytest.mark.reliability(1, 36)
def test_concurrent_duplicate_deliveries_make_one_episode(database):
    open_store(database).init()
    stores = [open_store(database) for _ in range(4)]
    p = payload(alert(), alert(fingerprint="other"))
    threads = [
        threading.Thread(target=lambda s=s: [s.record_alerts(p, 0, 1.0) for _ in range(10)])
        for s in stores
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    episodes = stores[0].pending_episodes()
    assert sorted(e.fingerprint for e in episodes) == ["abc123", "other"]
    assert stores[0].metric_snapshot()["requests"] == {"200": 40}


def test_non_reclaim_alerts_are_not_recorded(database):
    store = open_store(database)
    store.init()
    other = alert(labels={"alertname": "GpuExporterDown"})
    result = store.record_alerts(payload(other, alert()), 0, 1.0)
    assert (result.recorded, result.ignored) == (1, 1)


@pytest.mark.reliability(36)
def test_lease_has_one_holder_until_it_expires(database):
    store = open_store(database)
    store.init()
    assert store.acquire_lease("a", mono=100, ttl=10)
    assert not store.acquire_lease("b", mono=105, ttl=10)
    assert store.acquire_lease("a", mono=106, ttl=10)  # renewal
    assert not store.acquire_lease("b", mono=115, ttl=10)
    assert store.acquire_lease("b", mono=117, ttl=10)  # a's lease expired at 116
    store.release_lease("b")
    assert store.acquire_lease("a", mono=118, ttl=10)


@pytest.mark.reliability(36)
def test_a_finished_pass_renews_the_lease_with_its_progress_mark(database):
    store = open_store(database)
    store.init()
    assert store.acquire_lease("a", mono=100, ttl=10)
    assert store.mark_progress("a", mono=109, ttl=10)  # one commit: progress and renewal
    assert store.progress() == ("a", 119, 109)
    assert not store.acquire_lease("b", mono=117, ttl=10)  # renewed: a still holds it
    assert not store.mark_progress("b", mono=117, ttl=10)  # not b's to mark
    assert not store.mark_progress("a", mono=130, ttl=10)  # expired at 119: lost
    assert store.progress() == ("a", 119, 109)


def test_a_write_fenced_by_a_lost_lease_changes_nothing(database):
    from actuator.store import Fence, LeaseLost
    from tests.helpers.cases import make_case

    store = open_store(database)
    store.init()
    case = make_case(id=0)
    with store._tx() as conn:
        insert_case(conn, case, {})
    assert store.acquire_lease("a", mono=100, ttl=10)
    assert store.acquire_lease("b", mono=111, ttl=10)  # a was slow: b took over
    with pytest.raises(LeaseLost):
        store.transition(
            case,
            State.NOTIFIED,
            reason="r",
            evidence={},
            now=1,
            mono=112,
            fence=Fence("a", 112, 10),
        )
    assert store.get_case(case.id).state == State.PENDING and case.state == State.PENDING
    assert (
        store.transition(
            case,
            State.NOTIFIED,
            reason="r",
            evidence={},
            now=1,
            mono=112,
            fence=Fence("b", 112, 10),
        )
        is not None
    )
    assert store.progress()[0] == "b"


def test_breaker_toggles(database):
    store = open_store(database)
    store.init()
    assert store.breaker()[0] is False
    assert store.set_breaker(True, 1.0, "too many")
    assert not store.set_breaker(True, 2.0, "again")
    assert store.breaker() == (True, 1.0, "too many")
    assert store.set_breaker(False, 3.0, "reset")


@pytest.mark.reliability(40)
def test_a_new_connection_never_lets_another_process_delete_the_live_log(tmp_path):
    """Opening a second connection in a process used to open and close the database file
    itself, which drops every POSIX lock SQLite holds there: another process closing its
    connection then took itself for the last one and deleted the write-ahead log, and the
    first process's next commit was lost (seen on a full disk, where connections churn)."""
    import subprocess
    import sys

    path = tmp_path / "db.sqlite"
    first = Store(path)
    first.init()
    first.count("before")
    second_thread = threading.Thread(target=lambda: Store(path).count("from a second connection"))
    second_thread.start()
    second_thread.join()
    other_process = (
        "import sys; from actuator.store import Store; Store(sys.argv[1]).count('other')"
    )
    subprocess.run([sys.executable, "-c", other_process, str(path)], check=True)
    first.count("after")
    fresh = (
        "import sqlite3, sys; print(sorted(r[0] for r in sqlite3.connect(sys.argv[1])"
        ".execute('SELECT name FROM counters')))"
    )
    seen = subprocess.run(
        [sys.executable, "-c", fresh, str(path)], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert seen == str(sorted(["before", "from a second connection", "other", "after"]))


def test_an_owners_reclaims_are_counted_within_the_window_and_from_a_reset(database):
    from tests.helpers.cases import make_case

    store = open_store(database)
    store.init()
    with store._tx() as conn:
        for i, (user, state, term_at) in enumerate(
            [
                ("alice", State.RECLAIMED, 100.0),  # before the window
                ("alice", State.RECLAIMED, 1000.0),
                ("alice", State.RECLAIMED, 2000.0),
                ("alice", State.CANCELLED, 2000.0),  # not a reclaim
                ("bob", State.RECLAIMED, 2000.0),  # someone else's
            ],
            start=1,
        ):
            case = make_case(id=i, pid=1000 + i, state=state, user=user, term_at=term_at)
            insert_case(conn, case, {})
    assert store.reclaims_since("alice", 500.0) == 2
    store.reset_repeats("alice", 1500.0)  # an SRE's reset: only what came after counts
    assert store.reclaims_since("alice", 500.0) == 1
    assert store.reclaims_since("bob", 500.0) == 1


def test_samples_of_a_pass_are_saved_at_once_and_a_moved_row_keeps_its_own(database):
    from tests.helpers.cases import make_case

    store = open_store(database)
    store.init()
    with store._tx() as conn:
        for i in (1, 2, 3):
            insert_case(conn, make_case(id=i, pid=100 + i, state=State.PENDING), {})
    cases = {c.id: c for c in store.live_cases()}
    snoozed = store.get_case(2)
    assert snoozed is not None and store.save_samples(snoozed)  # moved meanwhile (a snooze)
    for case in cases.values():
        case.cpu_seconds, case.cpu_at = 5.0, 1000.0 + case.id
    assert store.save_samples_many(list(cases.values())) == 2
    assert [store.get_case(i).cpu_at for i in (1, 2, 3)] == [1001.0, None, 1003.0]  # type: ignore[union-attr]
    assert cases[1].version == cases[2].version + 1  # saved rows move on; the stale one not


def test_the_processes_other_live_cases_are_signalling_are_known_by_identity(database):
    from actuator.models import Member
    from actuator.signalled import SignalledTrees
    from tests.helpers.cases import TICKS, make_case

    store = open_store(database)
    store.init()
    tree = [Member(101, 7, 1001), Member(102, 8, 1001)]
    with store._tx() as conn:
        insert_case(conn, make_case(id=1, pid=101, state=State.TERMINATING, members=tree), {})
        insert_case(conn, make_case(id=2, pid=102, state=State.NOTIFIED), {})
        insert_case(conn, make_case(id=3, pid=103, state=State.NOTIFIED), {})  # not signalling
        insert_case(conn, make_case(id=4, pid=104, node="other", state=State.KILLING), {})
    mine, parents = store.get_case(2), store.get_case(1)
    assert mine is not None and parents is not None
    trees = SignalledTrees(store.signalled_trees)
    keys = [(101, 7), (102, 8), (103, TICKS), (104, TICKS)]  # 103: not signalling; 104: elsewhere
    assert trees.others(mine, keys) == {(101, 7): 1, (102, 8): 1}
    assert trees.others(parents, keys) == {}  # not its own
