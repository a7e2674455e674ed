"""A step's guard read in one statement, on each backend: the case's firing episodes, the
breaker, SIGTERMs on this clock per node and fleet-wide (a reading of another boot's clock
says nothing about "since"), and the owner's keep of this very process only."""

from __future__ import annotations

from actuator.models import State
from actuator.store import GuardFacts, KeepKey, Store, open_store
from actuator.store.cases import insert_case
from tests.helpers.cases import make_case

NODE, BOOT = "a", "boot-1"


def _store(database: str) -> Store:
    store = open_store(database)
    store.init()
    return store


def _facts(store: Store, *, keep: KeepKey | None = None, now: float = 0.0) -> GuardFacts:
    return store.guard_facts(
        99, NODE, node_since=0.0, fleet_since=0.0, clock=store.clock_id, keep=keep, now=now
    )


def test_terminations_are_counted_on_this_clock_per_node_and_in_all(database: str) -> None:
    store = _store(database)
    clock = store.clock_id
    cases = [
        make_case(id=1, node="a", pid=11, term_mono=500.0, clock=clock, state=State.RECLAIMED),
        make_case(id=2, node="a", pid=12, term_mono=900.0, clock=clock, state=State.RECLAIMED),
        make_case(id=3, node="b", pid=13, term_mono=950.0, clock=clock, state=State.RECLAIMED),
        # Another boot's clock: its 990 is no moment of this one.
        make_case(
            id=4, node="a", pid=14, term_mono=990.0, clock="other-boot", state=State.RECLAIMED
        ),
        make_case(id=5, node="a", pid=15, term_mono=None, clock=clock),  # never signalled
    ]
    with store._tx() as conn:
        for case in cases:
            insert_case(conn, case, {})

    def counts(node: str, node_since: float, fleet_since: float, clock: str) -> tuple[int, int]:
        facts = store.guard_facts(
            5,
            node,
            node_since=node_since,
            fleet_since=fleet_since,
            clock=clock,
            keep=None,
            now=0.0,
        )
        return facts.terminations_node, facts.terminations_fleet

    assert counts("a", 800.0, 800.0, clock) == (1, 2)
    assert counts("a", 0.0, 800.0, clock) == (2, 2)
    assert counts("b", 800.0, 0.0, clock) == (1, 3)
    assert counts("a", 0.0, 0.0, "other-boot") == (1, 1)


def test_the_breaker_is_read_as_it_stands(database: str) -> None:
    store = _store(database)
    assert _facts(store).breaker_open is False
    store.set_breaker(True, 100.0, "5 SIGTERMs in a minute")
    assert _facts(store).breaker_open is True
    store.set_breaker(False, 200.0, "reset by sre-ana")
    assert _facts(store).breaker_open is False


def test_a_keep_counts_for_its_own_process_only_and_only_when_asked(database: str) -> None:
    store = _store(database)
    store.add_keep(NODE, 4242, 1000, BOOT, 1001, until=2000.0, now=1000.0, by="alice")
    store.add_keep(NODE, 4242, 1000, BOOT, 1001, until=3000.0, now=1100.0, by="alice")
    mine = KeepKey(NODE, 4242, 1000, BOOT)
    assert _facts(store, keep=mine, now=1500.0).kept_until == 3000.0  # the latest replaces
    assert _facts(store, keep=mine, now=3000.0).kept_until is None  # expired
    assert _facts(store, keep=None, now=1500.0).kept_until is None  # not asked: not read
    # The same PID started later, after a reboot, or on another node: another process.
    for other in (
        KeepKey(NODE, 4242, 1001, BOOT),
        KeepKey(NODE, 4242, 1000, "boot-2"),
        KeepKey("gpu-08", 4242, 1000, BOOT),
    ):
        assert _facts(store, keep=other, now=1500.0).kept_until is None
    (keep,) = store.list_keeps(NODE, 1500.0)
    store.revoke_keep(keep.id)
    assert _facts(store, keep=mine, now=1500.0).kept_until is None  # revoked


def test_nothing_recorded_reads_as_nothing(database: str) -> None:
    facts = _facts(_store(database), keep=KeepKey(NODE, 1, 1, BOOT), now=1.0)
    assert (facts.unresolved, facts.breaker_open, facts.kept_until) == (0, False, None)
    assert (facts.terminations_node, facts.terminations_fleet) == (0, 0)
