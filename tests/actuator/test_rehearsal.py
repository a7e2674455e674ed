"""A node's rehearsals (actuator/rehearsal.py, `LocalNode.rehearse_many`) on a simulated
node with real processes: each step answered in the order given, each tree member verified
as for a real signal (a process gone or replaced under its PID says so), nothing sent."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from actuator.live import target_of
from actuator.models import Member
from actuator.node import LocalNode
from actuator.policy import Protect
from actuator.rehearsal import Rehearsal
from tests.helpers.actuator import NODE, Workload, Workloads


def _rehearsal(w: Workload) -> Rehearsal:
    target = target_of(NODE, w.pid, w.uuid)
    return Rehearsal(target, (Member(target.pid, target.start_ticks, 0),), "SIGTERM", "case-1")


def test_a_node_s_rehearsals_are_verified_in_order_and_send_nothing(workloads: Workloads) -> None:
    """`workloads`: tests/actuator/conftest.py's simulated node and its processes."""
    protect = Protect(protect_root=False, protected_uid_below=0)
    node = LocalNode(NODE, protect, sim_dir=str(workloads.node_dir))
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
