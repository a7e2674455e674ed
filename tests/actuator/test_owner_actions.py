"""The owner's one door (actuator/owner_actions.py), through the node's keep socket as a
real local user asks it: a keep in advance is a keep (the rule's bounds, the repeat step),
a kept process can be released, and nothing is kept when the rule cannot be told."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actuator.keep_bounds import owner_allowance
from actuator.keep_socket import KeepSocket
from actuator.operations import Why
from actuator.owner_actions import Owner, judge_keep
from actuator.policy import Effective
from actuator.runtime import Runtime
from tests.helpers.api import make_runtime
from tests.helpers.cases import eff

NOBODY = 65534
HOUR = 3600.0


@pytest.fixture
def rt(tmp_path: Path) -> Runtime:
    return make_runtime(tmp_path)


@pytest.fixture
def nobodys() -> Iterator[int]:
    """A process of an ordinary local user (uid 65534), with no case."""
    proc = subprocess.Popen(["sleep", "120"], user=NOBODY, group=NOBODY, extra_groups=[])
    yield proc.pid
    proc.kill()
    proc.wait()


def socket_for(rt: Runtime, tmp_path: Path, rule: Effective | None) -> KeepSocket:
    return KeepSocket(
        rt, str(tmp_path / "keep.sock"), node="n", max_seconds=24 * HOUR, rule_for=lambda _: rule
    )


def ask(sock: KeepSocket, uid: int, pid: int, action: str, seconds: float = 0) -> dict[str, Any]:
    request = {"pid": pid, "action": action, "seconds": seconds}
    return sock.answer((1, uid, uid), json.dumps(request).encode())


@pytest.mark.reliability(59)
def test_defect_3_a_keep_in_advance_is_bounded_by_the_rule(
    rt: Runtime, tmp_path: Path, nobodys: int
) -> None:
    """A 1 h rule: 2 h and 20 h asked before the case opens are refused with the bounds
    (the site allows 24 h); 30 minutes is kept."""
    sock = socket_for(rt, tmp_path, eff(keep_max=HOUR))
    for seconds in (2 * HOUR, 20 * HOUR):
        refused = ask(sock, NOBODY, nobodys, "keep", seconds)
        assert not refused["ok"] and refused["why"] == "out_of_bounds", refused
        assert "lets owners keep a process for 0s to 1h" in refused["error"]
    assert rt.store.list_keeps("n", rt.clock()) == []
    kept = ask(sock, NOBODY, nobodys, "keep", 1800)
    assert kept["ok"] and kept["case"] is None and kept["state"] == "kept ahead", kept


@pytest.mark.reliability(59)
def test_defect_3_a_keep_in_advance_follows_the_repeat_step(
    rt: Runtime, tmp_path: Path, nobodys: int
) -> None:
    """After repeat reclaims the step holds the owner's keeps for an SRE: asking before the
    case opens is no way around it. Root (the SRE) may keep it."""
    sock = socket_for(rt, tmp_path, eff(keep_max=HOUR, keep_needs_sre=True, repeat_prior=3))
    refused = ask(sock, NOBODY, nobodys, "keep", 1800)
    assert not refused["ok"] and refused["why"] == "needs_sre", refused
    assert "keeping needs an SRE's approval" in refused["error"]
    assert rt.store.list_keeps("n", rt.clock()) == []
    assert ask(sock, 0, nobodys, "keep", 1800)["ok"]


@pytest.mark.reliability(59)
def test_defect_3_the_environment_variable_follows_the_repeat_step() -> None:
    held = eff(keep_max=8 * HOUR, keep_needs_sre=True, repeat_prior=3)
    allowance = owner_allowance("GPU_RECLAIMER_KEEP=2h", held)
    assert allowance.seconds == 0.0
    assert "after 3 reclaims of your jobs, keeping needs an SRE's approval" in allowance.note
    assert owner_allowance("GPU_RECLAIMER_KEEP=2h", eff(keep_max=8 * HOUR)).seconds == 2 * HOUR


@pytest.mark.reliability(59)
def test_defect_3_an_owner_who_kept_in_advance_can_release(
    rt: Runtime, tmp_path: Path, nobodys: int
) -> None:
    sock = socket_for(rt, tmp_path, eff(keep_max=HOUR))
    assert ask(sock, NOBODY, nobodys, "keep", 1800)["ok"]
    released = ask(sock, NOBODY, nobodys, "release")
    assert released["ok"] and released["released"] and released["revoked_keep"], released
    assert rt.store.list_keeps("n", rt.clock()) == []
    again = ask(sock, NOBODY, nobodys, "release")
    assert not again["ok"] and "nothing to release" in again["error"]


def test_nothing_is_kept_when_the_rule_cannot_be_told(
    rt: Runtime, tmp_path: Path, nobodys: int
) -> None:
    refused = ask(socket_for(rt, tmp_path, None), NOBODY, nobodys, "keep", 1800)
    assert not refused["ok"] and refused["why"] == "rule_unknown"
    assert rt.store.list_keeps("n", rt.clock()) == []


@pytest.mark.parametrize(
    "seconds,owner,why",
    [
        (0.0, Owner("o"), Why.OUT_OF_BOUNDS),
        (25 * HOUR, Owner("o"), Why.OUT_OF_BOUNDS),  # past the site's keep_max
        (2 * HOUR, Owner("o"), Why.OUT_OF_BOUNDS),  # past the rule's
        (1800.0, Owner("o"), None),
        (1800.0, Owner("sre", privileged=True), None),
    ],
)
def test_judge_keep(seconds: float, owner: Owner, why: Why | None) -> None:
    refused = judge_keep(eff(keep_max=HOUR), seconds, owner, 24 * HOUR)
    assert (refused.why if refused is not None else None) == why


def test_the_page_and_the_socket_have_no_side_entrance() -> None:
    """Bounds and the rule a keep is judged by live behind the one door: neither the keep
    page nor the keep socket judges a keep or picks its rule itself."""
    import ast
    import inspect

    from actuator import keep_page, keep_socket

    for module in (keep_page, keep_socket):
        tree = ast.parse(inspect.getsource(module))
        names = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "actuator.keep_bounds"
            for alias in node.names
        }
        assert names == set(), f"{module.__name__} imports {names} from keep_bounds"


def test_a_recorded_rule_wins_and_the_nodes_selection_is_asked_only_without_one() -> None:
    from actuator.models import State
    from actuator.owner_actions import rule_for_keep
    from tests.helpers.cases import make_case

    asked: list[int] = []

    def selected() -> Effective | None:
        asked.append(1)
        return eff(keep_max=HOUR)

    recorded = make_case(state=State.NOTIFIED, effective=eff(keep_max=2 * HOUR).model_dump())
    rule = rule_for_keep(recorded, selected)
    assert rule is not None and rule.keep_max == 2 * HOUR and asked == []
    bare = make_case(state=State.PENDING, effective=None)
    rule = rule_for_keep(bare, selected)
    assert rule is not None and rule.keep_max == HOUR and asked == [1]
    assert rule_for_keep(None) is None
