"""The wait list's rows, on each backend: first come first, per node, until served (with
its GPUs), expired or left; an ended wait never ends again, and a promise is taken once."""

from __future__ import annotations

from actuator.store import open_store
from actuator.store.waiters import EXPIRED, LEFT, SERVED


def test_waiters_are_listed_first_come_first_per_node_until_their_time_is_up(
    database: str,
) -> None:
    store = open_store(database)
    store.init()
    first = store.add_waiter("a", 1001, 11, 100, 1, 0, now=10.0, expires=100.0)
    second = store.add_waiter("a", 1002, 12, 200, 0, 2**30, now=11.0, expires=50.0)
    store.add_waiter("b", 1003, 13, 300, 2, 0, now=12.0, expires=100.0)
    assert [w.id for w in store.waiters("a", now=20.0)] == [first, second]
    assert [w.id for w in store.waiters("a", now=60.0)] == [first]  # the second's time is up
    (w,) = store.waiters("b", now=20.0)
    assert (w.uid, w.pid, w.start_ticks, w.gpus, w.given, w.taken) == (1003, 13, 300, 2, (), 0.0)


def test_a_served_wait_keeps_its_gpus_and_its_first_taking(database: str) -> None:
    store = open_store(database)
    store.init()
    waiter = store.add_waiter("a", 1001, 11, 100, 2, 0, now=10.0, expires=100.0)
    assert store.end_waiter(waiter, SERVED, 20.0, given=("GPU-1", "GPU-2"))
    assert not store.end_waiter(waiter, EXPIRED, 21.0)  # only a waiting one ends
    assert store.waiters("a", now=30.0) == []
    (served,) = store.promised("a", since=15.0)
    assert served.state == SERVED and served.given == ("GPU-1", "GPU-2") and served.ended == 20.0
    assert store.promised("a", since=25.0) == []
    store.mark_taken(waiter, 40.0)
    store.mark_taken(waiter, 45.0)  # the first time counts
    assert store.promised("a", since=15.0)[0].taken == 40.0


def test_a_wait_that_left_is_not_promised(database: str) -> None:
    store = open_store(database)
    store.init()
    waiter = store.add_waiter("a", 1001, 11, 100, 1, 0, now=10.0, expires=100.0)
    assert store.end_waiter(waiter, LEFT, 12.0)
    assert store.waiters("a", now=13.0) == [] and store.promised("a", since=0.0) == []
