"""Cases on each backend: a transition is a compare-and-set (a step on a stale copy changes
nothing and leaves the copy as it was), ending a case takes it out of the live set and
stamps its end once, each transition adds to the timeline, one live case per target, and
pruning forgets only ended cases with everything they own."""

from __future__ import annotations

import json

import pytest

from actuator.models import Case, Member, State
from actuator.signalled import SignalledTrees
from actuator.store import Fence, LeaseLost, Transition, open_store
from actuator.store import cases as cases_module
from actuator.store.cases import copy_case, insert_case
from actuator.store.database import DUPLICATE
from actuator.store.signals import SignalSent
from tests.helpers.cases import make_case


def _stored(store, **kw):  # type: ignore[no-untyped-def]
    case = make_case(**kw)
    with store._tx() as conn:
        insert_case(conn, case, {"opened": True})
    return case


def _others(store, case, keys):  # type: ignore[no-untyped-def]
    """What a SIGTERM decision for `case` learns of `keys` (actuator/signalled.py)."""
    return SignalledTrees(store.signalled_trees).others(case, keys)


def test_a_step_on_a_stale_copy_changes_nothing(database: str) -> None:
    store = open_store(database)
    store.init()
    case = _stored(store)
    stale = store.get_case(case.id)
    assert stale is not None
    assert store.transition(case, State.NOTIFIED, reason="warned", evidence={}, now=10.0)
    assert case.version == stale.version + 1
    assert store.transition(stale, State.SNOOZED, reason="kept", evidence={}, now=11.0) is None
    assert (stale.state, stale.reason, stale.ended_at) == (State.PENDING, "", None)
    assert store.get_case(case.id).state == State.NOTIFIED  # type: ignore[union-attr]


def test_a_pass_s_decisions_commit_together_and_a_stale_one_holds_none_back(
    database: str,
) -> None:
    store = open_store(database)
    store.init()
    first, second = _stored(store, pid=101), _stored(store, pid=102)
    stale = store.get_case(second.id)
    assert stale is not None
    assert store.transition(second, State.SNOOZED, reason="kept", evidence={}, now=5.0)
    moves = [
        Transition(first, State.NOTIFIED, "warned", {"n": 1}, 10.0, "idle"),
        Transition(stale, State.CANCELLED, "working", {"n": 2}, 10.0, "activity", 3.0),
    ]
    assert store.transition_many(moves) == [True, False]
    assert store.get_case(first.id).state == State.NOTIFIED  # type: ignore[union-attr]
    assert (stale.state, stale.reason, stale.ended_at) == (State.PENDING, "", None)  # as it was
    assert store.get_case(second.id).state == State.SNOOZED  # type: ignore[union-attr]
    assert [t["state"] for t in store.timeline(first.id)] == ["pending", "notified"]
    assert store.transition_many([]) == []


def test_a_pass_s_decisions_fenced_by_a_lost_lease_change_nothing(database: str) -> None:
    store = open_store(database)
    store.init()
    cases = [_stored(store, pid=101), _stored(store, pid=102)]
    assert store.acquire_lease("a", mono=100, ttl=10)
    assert store.acquire_lease("b", mono=111, ttl=10)  # a was slow: b took over
    moves = [Transition(c, State.NOTIFIED, "warned", {}, 1.0) for c in cases]
    with pytest.raises(LeaseLost):
        store.transition_many(moves, Fence("a", 112, 10))
    for case in cases:
        assert case.state == State.PENDING and case.version == 0
        assert store.get_case(case.id).state == State.PENDING  # type: ignore[union-attr]


def test_an_ended_case_leaves_the_live_set_with_its_end_stamped_once(database: str) -> None:
    store = open_store(database)
    store.init()
    case = _stored(store)
    assert [c.id for c in store.live_cases()] == [case.id]
    assert store.live_case_for(case.target) is not None
    store.transition(
        case, State.CANCELLED, reason="working", evidence={"cpu": 1.2}, now=20.0, mono=5.0
    )
    assert store.live_cases() == [] and store.live_case_for(case.target) is None
    assert (case.ended_at, case.ended_mono) == (20.0, 5.0)
    timeline = store.timeline(case.id)
    assert [t["state"] for t in timeline] == ["pending", "cancelled"]
    assert timeline[1]["evidence"] == {"cpu": 1.2} and timeline[1]["reason"] == "working"


def test_one_live_case_per_target(database: str) -> None:
    store = open_store(database)
    store.init()
    _stored(store)
    with pytest.raises(DUPLICATE):
        _stored(store)
    _stored(store, pid=4243)  # another process is another target


def test_the_members_other_live_cases_signal_are_known(database: str) -> None:
    store = open_store(database)
    store.init()
    tree = [Member(100, 5), Member(101, 7), Member(102, 8)]  # the recorded tree, root first
    parent = _stored(store, pid=100, start_ticks=5, state=State.TERMINATING, members=tree)
    worker = _stored(store, pid=101, start_ticks=7)
    keys = [(m.pid, m.start_ticks) for m in tree]
    assert _others(store, worker, keys) == {key: parent.id for key in keys}
    assert _others(store, parent, keys) == {}  # the worker's own case signals nothing yet


def test_a_tree_recorded_before_members_had_a_column_is_still_known(database: str) -> None:
    """A store from before the `members` column: init adds it, and the trees that live
    cases recorded inside `data` are still read, by the signal path and by the case."""
    store = open_store(database)
    store.init()
    tree = [Member(100, 5, 1001), Member(101, 7, 1001)]
    parent = _stored(store, pid=100, start_ticks=5, state=State.TERMINATING, members=tree)
    worker = _stored(store, pid=101, start_ticks=7)
    with store._tx() as conn:
        row = conn.execute("SELECT data FROM cases WHERE id = ?", (parent.id,)).fetchone()
        data = json.loads(row["data"]) | {"members": [m.__dict__ for m in tree]}
        conn.execute("UPDATE cases SET data = ? WHERE id = ?", (json.dumps(data), parent.id))
        conn.execute("ALTER TABLE cases DROP COLUMN members")
    store.init()  # as an upgraded actuator starts
    keys = [(100, 5), (101, 7)]
    assert _others(store, worker, keys) == {key: parent.id for key in keys}
    assert store.get_case(parent.id).members == tree  # type: ignore[union-attr]
    assert store.transition(
        parent, State.KILLING, reason="killed", evidence={}, now=3.0
    )  # now in the column
    assert _others(store, worker, keys) == {key: parent.id for key in keys}


def test_pruning_forgets_ended_cases_only(database: str) -> None:
    store = open_store(database)
    store.init()
    live = _stored(store, pid=1)
    ended = _stored(store, pid=2)
    store.transition(ended, State.RECLAIMED, reason="freed", evidence={}, now=100.0)
    store.record_signals([SignalSent(ended.id, 2, "SIGTERM", 90.0)])
    assert store.prune(before=50.0) == 0  # ended after the cut-off: kept
    assert store.prune(before=200.0) == 1
    assert store.get_case(ended.id) is None and store.signals_for(ended.id) == []
    assert store.timeline(ended.id) == []
    assert store.get_case(live.id) is not None


def test_live_cases_are_parsed_again_only_when_their_row_changed(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(database)
    store.init()
    first, second = _stored(store, pid=101), _stored(store, pid=102)
    parsed: list[int] = []
    parse = cases_module.row_to_case

    def counted(row):  # type: ignore[no-untyped-def]
        parsed.append(row["id"])
        return parse(row)

    monkeypatch.setattr(cases_module, "row_to_case", counted)
    assert [c.id for c in store.live_cases()] == [first.id, second.id]
    assert sorted(parsed) == sorted([first.id, second.id])
    parsed.clear()
    assert store.live_cases() == [store.get_case(first.id), store.get_case(second.id)]
    assert parsed == [first.id, second.id]  # get_case parses; live_cases did not
    parsed.clear()
    # Writes that leave `version` as it was (samples, the re-arm mark, another worker's SQL)
    # are read all the same.
    with store._tx() as conn:
        conn.execute("UPDATE cases SET followup = -1 WHERE id = ?", (second.id,))
        row = conn.execute("SELECT data FROM cases WHERE id = ?", (first.id,)).fetchone()
        data = {**json.loads(row["data"]), "labels": {"user": "mallory"}}
        conn.execute("UPDATE cases SET data = ? WHERE id = ?", (json.dumps(data), first.id))
    found = {c.id: c for c in store.live_cases()}
    assert sorted(parsed) == sorted([first.id, second.id])
    assert found[second.id].followup == -1 and found[first.id].labels == {"user": "mallory"}
    assert found[first.id].version == first.version  # the same version, another row


def test_a_live_case_handed_out_shares_nothing_with_the_next_read(database: str) -> None:
    store = open_store(database)
    store.init()
    case = _stored(
        store,
        labels={"user": "alice"},
        effective={"grace": 60.0, "protect": {"users": ["root"]}},
        facts={"members": [[4242, 7]], "user": "alice"},
        members=[Member(4242, 7, 1001)],
    )
    (read,) = store.live_cases()
    read.labels["user"] = "mallory"
    assert read.effective is not None and read.facts is not None
    read.effective["protect"]["users"].append("alice")
    read.facts["members"][0][0] = 1
    read.members.append(Member(1, 1))
    read.state, read.term_mono = State.TERMINATING, 5.0
    (again,) = store.live_cases()
    assert again == store.get_case(case.id)
    assert again.labels == {"user": "alice"} and again.members == [Member(4242, 7, 1001)]
    assert again.effective == {"grace": 60.0, "protect": {"users": ["root"]}}
    assert again.facts == {"members": [[4242, 7]], "user": "alice"}
    assert (again.state, again.term_mono) == (State.PENDING, None)


def test_a_case_copy_equals_its_original_and_shares_no_container() -> None:
    case = make_case(labels={"a": "b"}, facts={"x": [{"y": [1]}]}, members=[Member(1, 2)])
    copy = copy_case(case)
    assert copy == case and type(copy) is Case
    assert copy.labels is not case.labels and copy.members is not case.members
    assert copy.facts is not None and case.facts is not None
    assert copy.facts["x"][0]["y"] is not case.facts["x"][0]["y"]


def test_the_live_cases_of_a_set_of_nodes_are_read_by_their_target(database: str) -> None:
    """An ingest batch's lookups in one read: every live case on the nodes asked, by its
    target's key; not an ended one, nor one on another node."""
    store = open_store(database)
    store.init()
    on_n1 = _stored(store, node="n1", pid=101)
    on_n2 = _stored(store, node="n2", pid=102)
    ended = _stored(store, node="n1", pid=103)
    store.transition(ended, State.CANCELLED, reason="working", evidence={}, now=20.0, mono=5.0)
    elsewhere = _stored(store, node="n3", pid=104)
    found = store.live_case_ids_on(["n1", "n2", "n2", "nowhere"])
    assert found == {on_n1.target.key: on_n1.id, on_n2.target.key: on_n2.id}
    assert elsewhere.target.key not in found
    assert store.live_case_ids_on([]) == {}
