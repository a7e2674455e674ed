"""Demand's side of a pass (actuator/demand/planner.py), on a real store, audit log and the
simulated node with real processes: a GPU whose processes are all candidates serves a
waiting job, one shared with a process nobody may reclaim does not; a source's outage is
recorded once; a reclaimed GPU nobody takes is a needless reclaim, one taken is audited
with its next holder."""

from __future__ import annotations

import json
from pathlib import Path

from actuator.audit import AuditLog
from actuator.demand import Reading, Request
from actuator.demand.fit import Verdict
from actuator.demand.planner import DemandPlanner
from actuator.demand.reader import DemandReader
from actuator.models import State
from actuator.node import LocalNode
from actuator.policy import Protect
from actuator.store import Store
from tests.helpers.actuator import NODE
from tests.helpers.cases import make_case

OPEN = Protect(protect_root=False, protected_uid_below=0)


class Queue:
    """A demand source whose answer the test sets (an exception: the source is down)."""

    name = "slurm"

    def __init__(self) -> None:
        self.answer: Reading | Exception = Reading()

    def read(self) -> Reading:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _planner(tmp_path: Path, workloads, queue: Queue, now: list[float]):  # type: ignore[no-untyped-def]
    store = Store(tmp_path / "db")
    store.init()
    audit = AuditLog(tmp_path / "audit.jsonl")
    node = LocalNode(NODE, OPEN, sim_dir=str(workloads.node_dir), sm_window=1.0)
    reader = DemandReader([queue], interval=0.0, clock=lambda: now[0])
    planner = DemandPlanner(
        reader,
        None,
        store=store,
        audit=audit,
        node=lambda name: node if name == NODE else None,
        clock=lambda: now[0],
        mono=lambda: now[0],
    )
    return planner, store, tmp_path / "audit.jsonl"


def _warned(case_id: int, pid: int, uuid: str):  # type: ignore[no-untyped-def]
    return make_case(
        id=case_id,
        node=NODE,
        pid=pid,
        uuid=uuid,
        state=State.NOTIFIED,
        notified_mono=1.0,
        effective={"reclaim_when": "demand"},
    )


def test_a_gpu_serves_a_waiting_job_only_when_it_holds_candidates_alone(tmp_path, workloads):
    idle = workloads.spawn(gpu=0, phases="idle")
    shared = workloads.spawn(gpu=1, phases="idle")
    workloads.spawn(gpu=1, phases="busy")  # beside `shared`, and nobody may reclaim it
    queue, now = Queue(), [1000.0]
    planner, _, _ = _planner(tmp_path, workloads, queue, now)
    queue.answer = Reading((Request(source="slurm", key="7", who="Slurm job 7", gpus=1),))
    choices = planner.plan([_warned(1, shared.pid, shared.uuid)])
    assert choices[1].verdict == Verdict.NOT_NEEDED  # its GPU is not its own
    choices = planner.plan([_warned(1, shared.pid, shared.uuid), _warned(2, idle.pid, idle.uuid)])
    assert choices[2].verdict == Verdict.CHOSEN and choices[1].verdict == Verdict.NOT_NEEDED


def test_an_outage_is_recorded_once_and_shows_in_the_gauges(tmp_path, workloads):
    from actuator.demand import DemandError

    queue, now = Queue(), [1000.0]
    planner, store, audit = _planner(tmp_path, workloads, queue, now)
    planner.plan([])
    queue.answer = DemandError("scontrol: timed out")
    for _ in range(3):
        now[0] += 1
        planner.plan([])
    assert store.demand_up() == {"slurm": False}
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    (down,) = [r for r in records if r["event"] == "demand_source"]
    assert down["up"] is False and down["error"] == "scontrol: timed out"


def test_a_reclaimed_gpu_taken_or_left(tmp_path, workloads):
    freed = make_case(id=3, node=NODE, pid=999_999, uuid=workloads.uuid(0), demand_for="slurm:7")
    idle_freed = make_case(id=4, node=NODE, pid=999_998, uuid=workloads.uuid(1))
    queue, now = Queue(), [1000.0]
    planner, store, audit = _planner(tmp_path, workloads, queue, now)
    planner.reclaimed(freed, now[0])
    planner.reclaimed(idle_freed, now[0])
    holder = workloads.spawn(gpu=0, phases="busy")  # the waiting job starts on GPU 0
    now[0] += 20
    planner.watch()
    now[0] += 3600
    planner.watch()
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    (taken,) = [r for r in records if r["event"] == "gpu_taken"]
    assert taken["case"] == 3 and taken["holders"] == [holder.pid]
    assert taken["request"] == "slurm:7" and taken["trigger"] == "demand"
    (needless,) = [r for r in records if r["event"] == "needless_reclaim"]
    assert needless["case"] == 4 and needless["trigger"] == "idle"
    assert store.metric_snapshot()["named"]["needless_reclaims"] == {"idle": 1}
