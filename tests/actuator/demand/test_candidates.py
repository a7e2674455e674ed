"""Which cases demand may choose from (actuator/demand/candidates.py): only warned cases under
reclaim_when: demand; a signalled one only as capacity for the request it serves."""

from __future__ import annotations

from actuator.demand.candidates import candidate, pids_on
from actuator.models import Member, State
from tests.helpers.cases import T0, make_case

DEMAND = {"reclaim_when": "demand"}


def test_only_warned_cases_under_demand_are_candidates():
    warned = make_case(state=State.NOTIFIED, notified_mono=T0 - 60, effective=DEMAND)
    found = candidate(warned, T0, 600)
    assert found is not None and not found.signalled and found.serving == ""
    assert (
        candidate(make_case(state=State.NOTIFIED, notified_mono=T0, effective={}), T0, 600) is None
    )
    not_delivered = make_case(state=State.NOTIFIED, notified_mono=None, effective=DEMAND)
    assert candidate(not_delivered, T0, 600) is None
    assert (
        candidate(make_case(state=State.SNOOZED, notified_mono=T0, effective=DEMAND), T0, 600)
        is None
    )


def test_a_signalled_case_is_capacity_only_for_its_own_request():
    mine = make_case(
        state=State.TERMINATING, notified_mono=T0, effective=DEMAND, demand_for="slurm:7"
    )
    found = candidate(mine, T0, 600)
    assert found is not None and found.signalled and found.serving == "slurm:7"
    idle_mode = make_case(state=State.TERMINATING, notified_mono=T0, effective=DEMAND)
    assert candidate(idle_mode, T0, 600) is None


def test_idle_since_never_before_the_process_and_a_recent_heartbeat_counts():
    # An alert claiming the idleness began before the process did: the process's start wins
    # (the case opened before it too, as a case carried over a process's restart could).
    case = make_case(
        state=State.NOTIFIED,
        notified_mono=T0,
        effective=DEMAND,
        created=T0 - 7200,
        starts_ts=T0 - 7200,
        start_time=T0 - 600,
        facts={"node": "n", "pid": 4242, "gpu_uuid": "GPU-0", "last_activity": T0 - 60},
    )
    found = candidate(case, T0, heartbeat_recent=300)
    assert found is not None and found.idle_since == T0 - 600 and found.heartbeat_recent
    assert not candidate(case, T0, heartbeat_recent=30).heartbeat_recent  # type: ignore[union-attr]


def test_the_processes_a_gpus_candidates_stand_for():
    a = make_case(pid=10, members=[Member(11, 1, 1000)])
    b = make_case(pid=20, uuid="GPU-1")
    assert pids_on([a, b], "n", "GPU-0") == {10, 11}
