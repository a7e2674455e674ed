"""The chaos plan: seeded (the same seed, the same plan), every kind of workload and fault
before any repeats, everything inside the run's active time, and every job ending."""

from __future__ import annotations

from actuator.chaos.plan import FAULT_KINDS, KINDS, make_plan
from exporter.sim.phases import parse_phases


def test_the_same_seed_gives_the_same_plan_with_every_kind_and_faults() -> None:
    a, b = make_plan(7, 180), make_plan(7, 180)
    assert a == b and a != make_plan(8, 180)
    assert {w.kind for w in a.workloads} == set(KINDS)
    assert all(20 <= f.at < 180 - 40 for f in a.faults)
    assert all(w.start_at < 180 - 40 for w in a.workloads)
    kinds = [f.kind for f in a.faults]
    assert len(set(kinds)) == len(kinds)  # every kind once before any repeats


def test_every_job_ends_and_every_program_parses() -> None:
    plan = make_plan(11, 600)
    for w in plan.workloads:
        phases = parse_phases(w.phases)  # the workload would refuse a bad program
        reclaimable = w.kind in ("abandoned", "hung", "stubborn", "dataloader")
        assert (phases[-1].name == "done") != reclaimable, w
    assert {f.kind for f in plan.faults} == set(FAULT_KINDS)  # ten minutes hold every kind
    assert all(f.seconds == 0 for f in plan.faults if f.kind.startswith("kill_"))
    assert {w.kind for w in plan.workloads if not w.log} == {"cpu"}
