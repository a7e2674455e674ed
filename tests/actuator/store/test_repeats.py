"""An owner's reclaims within a window, on each backend: only reclaimed cases of that
owner whose SIGTERM went out in the window count, until an SRE's reset."""

from __future__ import annotations

from actuator.models import State
from actuator.store import open_store
from actuator.store.cases import insert_case
from tests.helpers.cases import make_case


def test_an_owners_reclaims_are_counted_from_the_window_or_the_last_reset(
    database: str,
) -> None:
    store = open_store(database)
    store.init()
    cases = [
        make_case(id=1, pid=11, user="alice", state=State.RECLAIMED, term_at=1000.0),
        make_case(id=2, pid=12, user="alice", state=State.RECLAIMED, term_at=2000.0),
        make_case(id=3, pid=13, user="alice", state=State.FAILED, term_at=2100.0),
        make_case(id=4, pid=14, user="bob", state=State.RECLAIMED, term_at=2200.0),
        make_case(id=5, pid=15, user="alice", state=State.RECLAIMED, term_at=None),
    ]
    with store._tx() as conn:
        for case in cases:
            insert_case(conn, case, {})
    assert store.reclaims_since("alice", 0.0) == 2
    assert store.reclaims_since("alice", 1500.0) == 1
    assert store.reclaims_since("bob", 0.0) == 1
    assert store.repeat_reset_at("alice") == 0.0
    store.reset_repeats("alice", 1999.5)
    assert store.repeat_reset_at("alice") == 2000.0  # from the next whole second on
    assert store.reclaims_since("alice", 0.0) == 1  # the reset moves the window's start
    assert store.reclaims_since("bob", 0.0) == 1  # another owner's count is untouched
