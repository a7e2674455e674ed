"""The reconciler lease on each backend: one holder at a time, taken over only once it
expired, and the fence that makes a write by a holder that lost it change nothing."""

from __future__ import annotations

import pytest

from actuator.store import open_store
from actuator.store.lease import Fence, LeaseLost, check_fence

TTL = 10.0


def test_one_holder_at_a_time_and_a_takeover_only_after_expiry(database: str) -> None:
    store = open_store(database)
    store.init()
    assert store.acquire_lease("a", mono=100.0, ttl=TTL)
    assert not store.acquire_lease("b", mono=105.0, ttl=TTL)  # a holds it until 110
    assert store.acquire_lease("a", mono=105.0, ttl=TTL)  # renewed: until 115
    assert not store.acquire_lease("b", mono=114.0, ttl=TTL)
    assert store.acquire_lease("b", mono=116.0, ttl=TTL)  # a let it expire
    assert not store.acquire_lease("a", mono=117.0, ttl=TTL)
    holder, expires, _ = store.progress() or ("", 0.0, None)
    assert (holder, expires) == ("b", 126.0)


def test_progress_is_the_holders_and_starts_over_with_a_new_holder(database: str) -> None:
    store = open_store(database)
    store.init()
    assert store.progress() is None  # before any reconciler ran
    assert store.acquire_lease("a", mono=100.0, ttl=TTL)
    assert store.mark_progress("a", mono=101.0, ttl=TTL)  # and renewed: until 111
    assert store.progress() == ("a", 111.0, 101.0)
    assert not store.mark_progress("b", mono=102.0, ttl=TTL)  # not b's to mark
    assert store.acquire_lease("b", mono=112.0, ttl=TTL)
    assert store.progress() == ("b", 122.0, None)  # a's progress is not b's
    assert not store.mark_progress("a", mono=113.0, ttl=TTL)


def test_a_write_fenced_by_a_lost_lease_changes_nothing(database: str) -> None:
    store = open_store(database)
    store.init()
    assert store.acquire_lease("a", mono=100.0, ttl=TTL)
    with store._tx() as conn:
        check_fence(conn, Fence("a", mono=105.0, ttl=TTL))  # renews: until 115
    assert store.acquire_lease("b", mono=116.0, ttl=TTL)
    with pytest.raises(LeaseLost), store._tx() as conn:
        conn.execute("UPDATE lease SET progressed = ? WHERE name = 'reconciler'", (999.0,))
        check_fence(conn, Fence("a", mono=117.0, ttl=TTL))
    # The whole transaction was rolled back with the fence: b's lease and progress stand.
    assert store.progress() == ("b", 126.0, None)
    with store._tx() as conn:
        check_fence(conn, None)  # no fence (the HTTP side's writes): nothing to prove


def test_release_lets_another_take_it_at_once(database: str) -> None:
    store = open_store(database)
    store.init()
    assert store.acquire_lease("a", mono=100.0, ttl=TTL)
    store.release_lease("b")  # not b's to release
    assert not store.acquire_lease("b", mono=101.0, ttl=TTL)
    store.release_lease("a")
    assert store.acquire_lease("b", mono=101.0, ttl=TTL)


def test_a_held_lease_is_renewed_but_never_one_that_ran_out(database: str) -> None:
    store = open_store(database)
    store.init()
    assert store.acquire_lease("a", mono=100.0, ttl=TTL)
    assert store.renew_lease("a", mono=108.0, ttl=TTL)  # until 118
    assert not store.renew_lease("b", mono=109.0, ttl=TTL)  # not b's
    assert not store.acquire_lease("b", mono=117.0, ttl=TTL)
    assert not store.renew_lease("a", mono=119.0, ttl=TTL)  # ran out: another may hold it
    assert store.acquire_lease("b", mono=119.0, ttl=TTL)
