"""A node's rehearsals (actuator/rehearsal.py, `LocalNode.rehearse_many`) on a simulated
node with real processes: each step answered in the order given, each tree member verified
as for a real signal (a process gone or replaced under its PID says so), nothing sent."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from actuator.live import target_of
from actuator.models import Member
from actuator.node import LocalNode
from actuator.policy import Protect
from actuator.rehearsal import Rehearsal
from exporter.sim.state import init_node
from tests.helpers.actuator import NODE, Workload, Workloads

GIB = 1 << 30


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    init_node(tmp_path / "node", gpus=2, memory_total=80 * GIB, name="NVIDIA H100 80GB HBM3")
    return tmp_path / "node"


@pytest.fixture
def workloads(node_dir: Path) -> Iterator[Workloads]:
    made = Workloads(node_dir)
    yield made
    made.cleanup()


def _rehearsal(w: Workload) -> Rehearsal:
    target = target_of(NODE, w.pid, w.uuid)
    return Rehearsal(target, (Member(target.pid, target.start_ticks, 0),), "SIGTERM", "case-1")


def test_a_node_s_rehearsals_are_verified_in_order_and_send_nothing(
    node_dir: Path, workloads: Workloads
) -> None:
    node = LocalNode(
        NODE, Protect(protect_root=False, protected_uid_below=0), sim_dir=str(node_dir)
    )
    first, second, gone = workloads.spawn(), workloads.spawn(), workloads.spawn()
    # A member recorded with other start ticks is another process now: not the target's.
    stale = _rehearsal(second)
    member = stale.members[0]
    stale = replace(stale, members=(replace(member, start_ticks=member.start_ticks + 1),))
    ended = _rehearsal(gone)
    gone.proc.kill()
    gone.proc.wait(timeout=10)
    answers = node.rehearse_many([_rehearsal(first), stale, ended])
    assert [[(r.pid, r.sent, r.detail) for r in a] for a in answers] == [
        [(first.pid, False, "dry run")],
        [(second.pid, False, "dry run"), (second.pid, False, "gone or identity changed")],
        [(gone.pid, False, "gone or identity changed")],
    ]
    for w in (first, second):
        with pytest.raises(subprocess.TimeoutExpired):
            w.proc.wait(timeout=0.5)  # still running
