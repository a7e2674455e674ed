"""Demand's side of a pass (actuator/demand/planner.py), on a real store, audit log and the
simulated node with real processes: a GPU whose processes are all candidates serves a
waiting job, one shared with a process nobody may reclaim does not; a source's outage is
recorded once; a reclaimed GPU nobody takes is a needless reclaim, one taken is audited
with its next holder."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from actuator.audit import AuditLog
from actuator.demand import Claimant, Reading, Request
from actuator.demand.fit import Verdict
from actuator.demand.planner import DemandPlanner
from actuator.demand.reader import DemandReader
from actuator.models import LiveState, State, Target
from actuator.node import READING_TTL, LocalNode
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


def test_a_restore_waiting_for_room_is_demand_at_the_front_of_the_queue(tmp_path, workloads):
    """A suspended job asked back that found no room is demand before any other waiter, for
    its footprint on its own GPU: an idle process warned there may go for it. Asked back but
    not yet looked at (no wait for room) is no demand; a source down is unknown as ever."""
    idle = workloads.spawn(gpu=0, phases="idle")
    queue, now = Queue(), [1000.0]
    planner, _, _ = _planner(tmp_path, workloads, queue, now)
    older = Request(source="slurm", key="7", who="Slurm job 7", gpus=1, since=1.0)
    queue.answer = Reading((older,))
    suspended = make_case(
        id=5, node=NODE, pid=99999, uuid=idle.uuid, state=State.SUSPENDED, user="bob", uid=1000,
        gpu_memory_bytes=1 << 30, resume_requested_mono=900.0, suspend_at=990.0,
    )  # fmt: skip
    warned = dataclasses.replace(_warned(1, idle.pid, idle.uuid), gpu_memory_bytes=2 << 30)
    asked_only = planner.plan([warned, suspended])
    assert asked_only[1].request == older  # not yet waiting for room: no demand of its own
    waiting = dataclasses.replace(suspended, restore_waits=1)
    chosen = planner.plan([warned, waiting])[1]
    assert chosen.verdict == Verdict.CHOSEN and chosen.request is not None
    assert (chosen.request.source, chosen.request.key) == ("resume", "5")
    assert "bob's suspended job (case 5)" in chosen.reason
    from actuator.demand import DemandError

    queue.answer = DemandError("slurmctld down")
    now[0] += 1
    assert planner.plan([warned, waiting])[1].verdict == Verdict.UNKNOWN


@pytest.mark.reliability(51)
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
    time.sleep(READING_TTL + 0.05)  # the reading taken at the reclaim is not reused
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


@pytest.mark.reliability(53, 60)
def test_defect_4_the_fit_frees_only_a_gpu_its_reclaimable_cases_hold_alone(tmp_path, workloads):
    """A GPU holds an idle process and one its owner kept (both under demand): reclaiming
    the idle one would leave the GPU taken, so it is not chosen for a waiting job."""
    idle = workloads.spawn(gpu=0, phases="idle")
    kept = workloads.spawn(gpu=0, phases="idle")
    queue, now = Queue(), [1000.0]
    planner, _, _ = _planner(tmp_path, workloads, queue, now)
    queue.answer = Reading((Request(source="slurm", key="7", who="Slurm job 7", gpus=1),))
    kept_case = _warned(2, kept.pid, kept.uuid)
    kept_case.state, kept_case.snoozed_until = State.SNOOZED, now[0] + 3600
    choices = planner.plan([_warned(1, idle.pid, idle.uuid), kept_case])
    assert choices[1].verdict == Verdict.NOT_NEEDED, choices[1]
    assert 2 not in choices  # the kept case is no choice at all


@pytest.mark.reliability(60)
def test_defect_4_a_hand_off_is_proven_only_by_the_requests_own_process(tmp_path, workloads):
    """Two GPUs reclaimed for two waits: carol's (uid 4321) GPU, beside a kept process, is
    taken by a process that is not hers: no hand-off, the kept process is never named,
    and the reclaim is needless. root's wait's GPU is taken by root's process: handed off."""
    kept = workloads.spawn(gpu=0, phases="idle")
    queue, now = Queue(), [1000.0]
    planner, store, audit = _planner(tmp_path, workloads, queue, now)
    queue.answer = Reading(
        (
            Request("wait", "1", "carol's wait", gpus=1, claimant=Claimant(uid=4321)),
            Request("wait", "2", "root's wait", gpus=1, claimant=Claimant(uid=0)),
        )
    )
    carols = _warned(3, 999_999, workloads.uuid(0))
    roots = _warned(4, 999_998, workloads.uuid(1))
    carols.demand_for, roots.demand_for = "wait:1", "wait:2"
    planner.plan([carols, roots])  # the pass the reclaims were chosen in
    queue.answer = Reading()  # the waits were served: they left the queue
    planner.plan([carols, roots])
    time.sleep(READING_TTL + 0.05)
    planner.reclaimed(carols, now[0])
    planner.reclaimed(roots, now[0])
    stranger = workloads.spawn(gpu=0, phases="busy")
    mine = workloads.spawn(gpu=1, phases="busy")
    time.sleep(READING_TTL + 0.05)
    now[0] += 20
    planner.watch()
    now[0] += 3600
    planner.watch()
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    (handed,) = [r for r in records if r["event"] == "handed_off"]
    assert handed["case"] == 4 and handed["holders"] == [mine.pid]
    assert handed["request"] == "wait:2"
    (needless,) = [r for r in records if r["event"] == "needless_reclaim"]
    assert needless["case"] == 3 and needless["trigger"] == "demand"
    assert needless["holders"] == [stranger.pid] and kept.pid not in needless["holders"]
    assert "not uid 4321's" in needless["why"]
    assert not [r for r in records if r["event"] == "gpu_taken" and r["case"] == 3]
    assert store.metric_snapshot()["named"]["needless_reclaims"] == {"demand": 1}


class PodNode:
    """A node whose GPU 0 lists what the test says and whose processes belong to pods
    (as the kubelet would say); anything else it is asked fails the test."""

    def __init__(self, pods: dict[int, str]) -> None:
        self.pods, self.listed = pods, {}  # type: ignore[var-annotated]

    def gpu_processes(self, uuid: str) -> dict[int, int]:
        return dict(self.listed)

    def inspect_many(self, targets: Sequence[Target]) -> list[LiveState]:
        return [self.inspect(target) for target in targets]

    def inspect(self, target: Target) -> LiveState:
        namespace, _, name = self.pods[target.pid].partition("/")
        known = target.start_ticks == 7  # the pod is told for the very process only
        return LiveState(
            sampled_at=0.0,
            exists=True,
            start_ticks=7,
            boot_id="b",
            uid=0,
            namespace=namespace if known else "",
            pod=name if known else "",
        )


@pytest.mark.reliability(60)
def test_a_pods_hand_off_is_proven_by_a_process_of_that_pod(tmp_path):
    node = PodNode({11: "ml/other", 12: "training/resnet-0"})
    store = Store(tmp_path / "db")
    store.init()
    queue, now = Queue(), [1000.0]
    queue.answer = Reading(
        (
            Request(
                "kubernetes", "training/resnet-0", "pod", claimant=Claimant(pod="training/resnet-0")
            ),
        )
    )
    planner = DemandPlanner(
        DemandReader([queue], interval=0.0, clock=lambda: now[0]),
        None,
        store=store,
        audit=AuditLog(tmp_path / "audit.jsonl"),
        node=lambda _: node,  # type: ignore[arg-type,return-value]
        clock=lambda: now[0],
        mono=lambda: now[0],
    )
    case = _warned(5, 10, "GPU-0")
    case.demand_for = "kubernetes:training/resnet-0"
    planner.plan([case])  # the pass it was chosen in
    planner.reclaimed(case, now[0])
    node.listed = {11: 1}  # another pod's process first: no hand-off
    now[0] += 20
    planner.watch()
    node.listed = {11: 1, 12: 1}
    now[0] += 20
    planner.watch()
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    (handed,) = [r for r in records if r["event"] == "handed_off"]
    assert handed["holders"] == [12] and handed["request"] == "kubernetes:training/resnet-0"
