"""The rule book (actuator/rulebook.py): a case's rule comes from what the node proves, the
alert's labels only make it safer, the owner's repeat reclaims are counted once per pass,
and a process with no case gets the rule its node's facts select, or none."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from actuator.fleet.directory import NodeDirectory
from actuator.models import LiveState, State, Target
from actuator.rulebook import RuleBook
from actuator.runtime import Runtime
from actuator.store.cases import insert_case
from exporter import procfs
from exporter.thresholds import Thresholds
from tests.helpers.api import make_runtime
from tests.helpers.cases import make_case

NOW = 2_000_000_000.0
POLICY = {
    "projects": [
        {"name": "interns", "match": {"users": ["intern"]}, "grace": "5m"},
        {"name": "vision", "match": {"labels": ["vision"]}, "protected": True},
    ],
    "repeat": {"window": "30d", "steps": [{"after": 1, "grace": "1m"}]},
}


class OneProcessNode:
    """A node that proves one process's facts (the re-check itself is tested elsewhere)."""

    name = "n"

    def __init__(self, live: LiveState) -> None:
        self.live = live
        self.inspected: list[Target] = []

    def inspect_many(self, targets: Sequence[Target]) -> list[LiveState]:
        return [self.inspect(target) for target in targets]

    def inspect(self, target: Target) -> LiveState:
        self.inspected.append(target)
        return self.live


def book(rt: Runtime, node: OneProcessNode | None = None) -> RuleBook:
    nodes = NodeDirectory({"n": node} if node else None)  # type: ignore[dict-item]
    return RuleBook(rt.config, rt.store, nodes, [], None, Thresholds(), clock=lambda: NOW)


@pytest.fixture
def rt(tmp_path: Path) -> Runtime:
    return make_runtime(tmp_path, node={"name": "n"}, **POLICY)


def test_the_owner_is_who_the_node_says_not_who_the_alert_says(rt: Runtime) -> None:
    case = make_case(user="intern", labels={})
    live = LiveState(sampled_at=NOW, exists=True, user="alice")
    assert book(rt).for_case(case).rule.startswith("projects #1")  # no live state: the case
    assert book(rt).for_case(case, live).rule == "defaults"  # the node proved alice


def test_the_alerts_labels_only_make_it_safer(rt: Runtime) -> None:
    live = LiveState(sampled_at=NOW, exists=True, user="alice")
    claimed = make_case(user="alice", labels={"project": "vision", "class": "service"})
    rule = book(rt).for_case(claimed, live)
    assert rule.protected and rule.service  # claims may hold it back
    assert rule.rule.startswith("defaults, made safer by projects #2 (vision), as a service")
    # An intern's forged labels cannot take them out of their rule.
    intern = LiveState(sampled_at=NOW, exists=True, user="intern")
    assert book(rt).for_case(make_case(labels={"project": "x"}), intern).grace == 300


def test_repeat_reclaims_are_counted_once_per_pass(rt: Runtime) -> None:
    rules = book(rt)
    live = LiveState(sampled_at=NOW, exists=True, user="bob")
    assert rules.for_case(make_case(user="bob"), live).repeat_prior == 0
    with rt.store._tx() as conn:  # bob's job was reclaimed meanwhile
        insert_case(conn, make_case(id=9, user="bob", state=State.RECLAIMED, term_at=NOW - 60), {})
    assert rules.for_case(make_case(user="bob"), live).repeat_prior == 0  # same pass
    rules.new_pass()
    stepped = rules.for_case(make_case(user="bob"), live)
    assert stepped.repeat_prior == 1 and stepped.grace == 60


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_process_without_a_case_gets_its_nodes_rule_or_none(rt: Runtime, sleeper: int) -> None:
    ticks = procfs.start_ticks(sleeper)
    live = LiveState(sampled_at=NOW, exists=True, start_ticks=ticks, user="intern")
    node = OneProcessNode(live)
    rule = book(rt, node).for_process(sleeper)
    assert rule is not None and rule.grace == 300
    assert node.inspected[0].pid == sleeper and node.inspected[0].start_ticks == ticks
    # The PID now names another process: no rule, so nothing is kept by a guess.
    node.live = LiveState(sampled_at=NOW, exists=True, start_ticks=(ticks or 0) + 1, user="x")
    assert book(rt, node).for_process(sleeper) is None
    node.live = LiveState(sampled_at=NOW, exists=True, start_ticks=ticks, user=None)
    assert book(rt, node).for_process(sleeper) is None  # whose it is cannot be told
    assert book(rt).for_process(sleeper) is None  # this node is not in the directory
    assert book(rt, node).for_process(2**22 + os.getpid()) is None  # no such process
