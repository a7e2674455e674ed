"""A step's guard read while it waits for its turn: used at its turn as read, and read
again when a SIGTERM was committed after the read began, so the rate limits still count
every SIGTERM decided before, as if the steps ran in turn (two nodes' steps racing:
tests/actuator/test_reconciler.py)."""

from __future__ import annotations

from actuator.guard_reader import GuardReader
from actuator.models import State
from actuator.store import Store, open_store
from actuator.store.cases import insert_case
from tests.helpers.cases import make_case
from tests.helpers.guard_reads import CountedGuardReads


def _store(database: str) -> Store:
    store = open_store(database)
    store.init()
    return store


def _sigterm_committed(store: Store, case_id: int, mono: float) -> None:
    case = make_case(
        id=case_id,
        node="n",
        pid=case_id,
        term_mono=mono,
        clock=store.clock_id,
        state=State.TERMINATING,
    )
    with store._tx() as conn:
        insert_case(conn, case, {})


def test_a_read_before_the_turn_is_used_at_the_turn_when_no_sigterm_came_since(
    database: str,
) -> None:
    store = _store(database)
    made = [0]
    reader = GuardReader(store, lambda: made[0], clock=lambda: 1000.0, mono=lambda: 500.0)
    counted = CountedGuardReads(store)
    case = make_case(id=1, node="n")
    read = reader.read(case)
    guard = reader.at_turn(case, read, demand=None)
    assert counted.reads == 1  # one round trip for the step, not two
    assert guard.terminations_minute == 0 and guard.breaker_open is False


def test_a_sigterm_committed_after_the_read_began_is_counted_at_the_turn(database: str) -> None:
    store = _store(database)
    made = [0]
    reader = GuardReader(store, lambda: made[0], clock=lambda: 1000.0, mono=lambda: 500.0)
    case = make_case(id=1, node="n")
    read = reader.read(case)
    _sigterm_committed(store, 7, mono=499.0)  # another node's step, at its turn
    made[0] += 1
    guard = reader.at_turn(case, read, demand=None)
    assert (guard.terminations_minute, guard.terminations_node_hour) == (1, 1)


def test_a_step_with_nothing_read_reads_at_its_turn(database: str) -> None:
    store = _store(database)
    reader = GuardReader(store, lambda: 0, clock=lambda: 1000.0, mono=lambda: 500.0)
    counted = CountedGuardReads(store)
    reader.at_turn(make_case(id=1, node="n"), None, demand=None)
    assert counted.reads == 1
