"""Fit and choice (actuator/demand/fit.py): pure, with the clock injected. Whole-GPU requests
are served only by GPUs that hold reclaimable processes alone, on one node the request may
run on; nothing is chosen on unknown demand, for a request the candidates cannot serve, or
twice for the same wait."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actuator.demand import Demand, Request
from actuator.demand.fit import Candidate, Verdict, plan

NOW = 1_800_000_000.0
GIB = 1 << 30


def idle(case: int, node: str = "n1", gpu: str = "", minutes: float = 30, **kw) -> Candidate:
    return Candidate(
        case=case,
        node=node,
        gpu=gpu or f"GPU-{node}-{case}",
        memory_bytes=4 * GIB,
        idle_since=NOW - minutes * 60,
        **kw,
    )


def job(key: str = "4711", gpus: int = 1, waited: float = 9, **kw) -> Request:
    return Request(
        source="slurm",
        key=key,
        who=f"Slurm job {key} of bob",
        gpus=gpus,
        since=NOW - waited * 60,
        **kw,
    )


def exclusive(*cands: Candidate, value: bool | None = True) -> dict[tuple[str, str], bool | None]:
    return {(c.node, c.gpu): value for c in cands}


def chosen(choices) -> set[int]:
    return {case for case, c in choices.items() if c.verdict == Verdict.CHOSEN}


def test_nobody_waiting_chooses_nobody():
    a = idle(1)
    choices = plan(Demand(), [a], exclusive(a), NOW)
    assert choices[1].verdict == Verdict.NOT_NEEDED and choices[1].reason == "nobody is waiting"


def test_unknown_demand_holds_everyone_and_names_the_source():
    a = idle(1)
    demand = Demand(requests=(job(),), down={"slurm": "scontrol: timed out"})
    choices = plan(demand, [a], exclusive(a), NOW)
    assert choices[1].verdict == Verdict.UNKNOWN
    assert "slurm: scontrol: timed out" in choices[1].reason


def test_the_longest_idle_gpu_serves_a_one_gpu_request_and_says_why():
    newer, older = idle(1, minutes=10), idle(2, minutes=47)
    choices = plan(Demand((job(),)), [newer, older], exclusive(newer, older), NOW)
    assert chosen(choices) == {2}
    assert choices[2].reason == "chosen for Slurm job 4711 of bob waiting 9m; idle 47m"
    assert choices[1].verdict == Verdict.NOT_NEEDED


def test_two_gpus_on_one_node_or_nothing():
    """One idle GPU and one busy (a process nobody may reclaim): a two-GPU job gets none."""
    free, shared = idle(1), idle(2)
    ex = {(free.node, free.gpu): True, (shared.node, shared.gpu): False}
    assert chosen(plan(Demand((job(gpus=2),)), [free, shared], ex, NOW)) == set()
    # Two idle GPUs, but on two nodes: still nothing.
    a, b = idle(1, node="n1"), idle(2, node="n2")
    assert chosen(plan(Demand((job(gpus=2),)), [a, b], exclusive(a, b), NOW)) == set()
    # Two idle GPUs on one node: both.
    c, d = idle(1), idle(2)
    assert chosen(plan(Demand((job(gpus=2),)), [c, d], exclusive(c, d), NOW)) == {1, 2}


def test_gpus_already_free_count_before_any_reclaim():
    """A two-GPU job on a node with one GPU free and one idle: only the idle one goes; with
    two free, nothing goes (the scheduler starts the job itself); free GPUs are counted once."""
    a = idle(1)
    choices = plan(Demand((job(gpus=2),), free={"n1": 1}), [a], exclusive(a), NOW)
    assert chosen(choices) == {1}
    assert chosen(plan(Demand((job(gpus=2),), free={"n1": 2}), [a], exclusive(a), NOW)) == set()
    # Two waiting two-GPU jobs, one free GPU: the first takes it and the idle one; the second
    # finds nothing left.
    b = idle(2, minutes=5)
    two = (job("1", gpus=2, waited=20), job("2", gpus=2, waited=10))
    choices = plan(Demand(two, free={"n1": 1}), [a, b], exclusive(a, b), NOW)
    assert chosen(choices) == {1} and choices[1].request == two[0]


def test_an_unknown_process_list_frees_nothing_whole():
    a = idle(1)
    assert chosen(plan(Demand((job(),)), [a], exclusive(a, value=None), NOW)) == set()


def test_a_request_runs_only_where_it_may():
    a = idle(1, node="n1")
    assert chosen(plan(Demand((job(nodes=("n2",)),)), [a], exclusive(a), NOW)) == set()
    assert chosen(plan(Demand((job(nodes=("n*",)),)), [a], exclusive(a), NOW)) == {1}


def test_a_gpu_in_flight_for_a_request_is_not_doubled():
    signalled = idle(1, serving="slurm:4711", signalled=True)
    other = idle(2, minutes=90)
    choices = plan(Demand((job(),)), [signalled, other], exclusive(signalled, other), NOW)
    assert chosen(choices) == set() and 1 not in choices  # the signalled one needs no choice
    # An escalating case keeps its request even when an older idle GPU appears.
    escalating = idle(3, minutes=5, serving="slurm:4711")
    choices = plan(Demand((job(),)), [escalating, other], exclusive(escalating, other), NOW)
    assert chosen(choices) == {3}


def test_oldest_request_first_when_only_one_can_be_served():
    a = idle(1)
    old, new = job("1", waited=30), job("2", waited=1)
    choices = plan(Demand((new, old)), [a], exclusive(a), NOW)
    assert choices[1].request == old


def test_a_memory_request_needs_enough_memory_on_one_gpu():
    a = idle(1)  # 4 GiB, sharing its GPU with others (not exclusive)
    want = Request(source="wait", key="w1", who="carol", gpus=0, memory_bytes=3 * GIB)
    assert chosen(plan(Demand((want,)), [a], exclusive(a, value=False), NOW)) == {1}
    more = Request(source="wait", key="w2", who="carol", gpus=0, memory_bytes=8 * GIB)
    assert chosen(plan(Demand((more,)), [a], exclusive(a, value=False), NOW)) == set()


def test_a_restore_asked_back_is_served_first_and_only_on_its_own_gpu():
    """A suspended job its owner asked back (`first`) goes before the oldest waiter, and
    only a candidate on the GPU it names frees room for it."""
    mine, other = idle(1, gpu="GPU-0"), idle(2, gpu="GPU-1")
    want = {"gpus": 0, "memory_bytes": 3 * GIB}
    old = Request(source="wait", key="w1", who="carol", since=NOW - 3600, **want)
    back = Request(
        source="resume", key="9", who="bob", since=NOW - 60, on_gpus=("GPU-0",), first=True, **want
    )
    choices = plan(Demand((old, back)), [mine, other], exclusive(mine, other), NOW)
    assert choices[1].request == back and choices[2].request == old
    elsewhere = plan(Demand((back,)), [other], exclusive(other), NOW)
    assert chosen(elsewhere) == set()  # GPU-1's idle process frees nothing for it


@pytest.mark.parametrize("key", ["processes", "heartbeat_recent", "kept_before"])
def test_less_work_at_risk_goes_first_when_idle_as_long(key):
    value = {"processes": 3, "heartbeat_recent": True, "kept_before": True}[key]
    risky, plain = idle(1, **{key: value}), idle(2)
    assert chosen(plan(Demand((job(),)), [risky, plain], exclusive(risky, plain), NOW)) == {2}


_candidates = st.lists(
    st.builds(
        Candidate,
        case=st.integers(1, 40),
        node=st.sampled_from(["n1", "n2"]),
        gpu=st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]),
        memory_bytes=st.integers(0, 8 * GIB),
        idle_since=st.floats(NOW - 86400, NOW),
        processes=st.integers(1, 4),
    ),
    unique_by=lambda c: c.case,
    max_size=8,
)
_requests = st.lists(
    st.builds(
        Request,
        source=st.just("slurm"),
        key=st.text("0123456789", min_size=1, max_size=4),
        who=st.just("job"),
        gpus=st.integers(1, 3),
        nodes=st.sampled_from([(), ("n1",), ("n2",)]),
        since=st.floats(NOW - 3600, NOW),
    ),
    unique_by=lambda r: r.key,
    max_size=4,
)


@given(
    _candidates,
    _requests,
    st.dictionaries(st.sampled_from(["n1", "n2"]), st.integers(0, 2)),
    st.dictionaries(
        st.tuples(st.sampled_from(["n1", "n2"]), st.sampled_from(["GPU-a", "GPU-b", "GPU-c"])),
        st.sampled_from([True, False, None]),
    ),
)
def test_choices_are_always_safe(cands, requests, free, ex):
    choices = plan(Demand(tuple(requests), free=free), cands, ex, NOW)
    by_case = {c.case: c for c in cands}
    served: dict[str, set[tuple[str, str]]] = {}
    for case, choice in choices.items():
        if choice.verdict != Verdict.CHOSEN:
            continue
        c, r = by_case[case], choice.request
        assert r is not None and r.may_run_on(c.node)
        assert ex.get((c.node, c.gpu)) is True  # whole GPUs: only a GPU they hold alone
        served.setdefault(r.ref, set()).add((c.node, c.gpu))
    spent: dict[str, int] = {}
    for ref, gpus in served.items():
        request = next(r for r in requests if r.ref == ref)
        (node,) = {node for node, _ in gpus}  # on one node
        # exactly what it needs beside the free GPUs: never more, never part
        beside = request.gpus - len(gpus)
        assert 0 <= beside <= free.get(node, 0) - spent.get(node, 0)
        spent[node] = spent.get(node, 0) + beside
    # Unknown demand: nothing chosen, whatever else holds.
    unknown = plan(Demand(tuple(requests), down={"slurm": "x"}, free=free), cands, ex, NOW)
    assert all(c.verdict == Verdict.UNKNOWN for c in unknown.values())
