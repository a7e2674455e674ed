"""Group commit (actuator/store/group_commit.py, the webhook's `record_alerts`): deliveries
that arrive together share one transaction, each gets its own answer, a bad one costs only
itself, and an acknowledged delivery survives a crash at any moment (a real process,
really killed)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from actuator.models import AlertmanagerAlert
from actuator.store import Store, StoreUnavailable, open_store
from actuator.store.episodes import Ingest, _Delivery
from actuator.store.group_commit import GroupCommit
from tests.helpers.api import alert

REPO = Path(__file__).resolve().parents[3]


def firing(fingerprint: str) -> AlertmanagerAlert:
    return AlertmanagerAlert.model_validate(alert(fingerprint=fingerprint))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    made = Store(tmp_path / "db.sqlite")
    made.init()
    return made


def test_deliveries_that_arrive_together_commit_together(store: Store) -> None:
    """32 threads deliver at once: every alert recorded once, each delivery answered with
    its own counts, in fewer transactions than deliveries."""
    start = threading.Barrier(32)
    answers: dict[int, int] = {}

    def deliver(n: int) -> None:
        start.wait()
        for k in range(5):
            ingest = store.record_alerts([firing(f"fp-{n}-{k}")], 0, time.time())
            answers[n] = answers.get(n, 0) + ingest.recorded

    threads = [threading.Thread(target=deliver, args=(n,)) for n in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == {n: 5 for n in range(32)}
    assert len(store.pending_episodes(1000)) == 160
    groups = store.alert_groups
    assert groups is not None and groups.groups < 160 and groups.largest > 1
    # Counted once per delivery, however many shared a commit (one statement a group).
    assert store.metric_snapshot()["requests"] == {"200": 160}


def test_a_delivery_alone_commits_at_once(store: Store) -> None:
    began = time.monotonic()
    ingest = store.record_alerts([firing("alone")], 0, time.time())
    assert ingest.recorded == 1 and time.monotonic() - began < 1.0
    again = store.record_alerts([firing("alone")], 0, time.time())
    assert again.duplicates and again.duplicates[0][2] == 2  # the second delivery, said so


def test_a_delivery_that_fails_costs_the_others_of_its_group_nothing(database: str) -> None:
    """A group is written as it comes, without a savepoint each; when one delivery fails
    (here its start time is not a time), that transaction is rolled back and the group
    written again, each delivery in a savepoint: the others are recorded once and counted
    once, the bad one is answered with its own error and leaves nothing behind."""
    store = open_store(database)
    store.init()
    bad = AlertmanagerAlert.model_construct(**{**alert(fingerprint="bad"), "startsAt": "soon"})
    now = time.time()
    first, failed, last = store._record_group(
        [
            _Delivery([firing("a")], 0, now),
            _Delivery([bad], 0, now),
            _Delivery([firing("b")], 0, now),
        ]
    )
    assert isinstance(first, Ingest) and first.recorded == 1 and not first.duplicates
    assert isinstance(failed, AttributeError)  # a str has no astimezone
    assert isinstance(last, Ingest) and last.recorded == 1 and not last.duplicates
    assert sorted(e.fingerprint for e in store.pending_episodes(10)) == ["a", "b"]
    assert store.metric_snapshot()["requests"] == {"200": 2}
    clean = store._record_group([_Delivery([firing("c")], 0, now)])  # the next group as it comes
    assert isinstance(clean[0], Ingest) and clean[0].recorded == 1


def test_one_bad_ask_costs_only_itself_and_a_failed_commit_fails_every_ask() -> None:
    def run(asks: list[int]) -> list[int | BaseException]:
        if 0 in asks:
            raise StoreUnavailable("the commit failed")
        return [ValueError("bad") if a < 0 else a * 10 for a in asks]

    group: GroupCommit[int, int] = GroupCommit(run)
    assert group.submit(3) == 30
    with pytest.raises(ValueError):
        group.submit(-1)
    with pytest.raises(StoreUnavailable):
        group.submit(0)
    assert group.submit(4) == 40  # the next group leads afresh


CHILD = textwrap.dedent(
    """
    import sys, threading, time
    from actuator.models import AlertmanagerAlert
    from actuator.store import Store
    from tests.helpers.api import alert

    store = Store(sys.argv[1])
    store.init()
    lock = threading.Lock()

    def deliver(n):
        k = 0
        while True:
            fp = f"fp-{n}-{k}"
            store.record_alerts(
                [AlertmanagerAlert.model_validate(alert(fingerprint=fp))], 0, time.time()
            )
            with lock:  # acknowledged: only now may anyone be told
                sys.stdout.write(fp + "\\n")
                sys.stdout.flush()
            k += 1

    for n in range(16):
        threading.Thread(target=deliver, args=(n,), daemon=True).start()
    time.sleep(60)
    """
)


@pytest.mark.parametrize("after", [0.3, 0.9])
def test_a_crash_loses_no_acknowledged_delivery(tmp_path: Path, after: float) -> None:
    """16 threads deliver as fast as they can in a real process, each printing a delivery
    only after `record_alerts` returned; the process is SIGKILLed mid-stream. Every
    delivery it acknowledged is in the database."""
    db = tmp_path / "db.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    acknowledged: list[str] = []

    def read() -> None:
        assert child.stdout is not None
        acknowledged.extend(line.strip() for line in child.stdout)

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 30
    while len(acknowledged) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(after)
    child.send_signal(signal.SIGKILL)
    child.wait()
    reader.join()
    assert len(acknowledged) >= 200
    with sqlite3.connect(db) as conn:
        recorded = {row[0] for row in conn.execute("SELECT fingerprint FROM episodes")}
    assert set(acknowledged) <= recorded, sorted(set(acknowledged) - recorded)[:5]
