"""The reconciler in-process, over a real SQLite store and audit log, with a scripted node:
isolation, fencing, re-arming, the notice gate, readiness."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from actuator import operations
from actuator.app import create_app
from actuator.audit import AuditLog
from actuator.audit_records import DecisionMade
from actuator.checkpoint import CheckpointResult
from actuator.compose import build_reconciler
from actuator.config import ActuatorConfig, merge_config
from actuator.models import LiveState, Member, SignalResult, State, Target
from actuator.notifications.notify import NoticeResult
from actuator.reconciler import BATCHED_FRESH_FOR, Reconciler
from actuator.rehearsal import Rehearsal
from actuator.runtime import Runtime
from actuator.store import database as database_module
from actuator.store import open_store
from tests.helpers.api import AUTH, TOKEN, alert, body
from tests.helpers.cases import BOOT, TICKS
from tests.helpers.guard_reads import CountedGuardReads
from tests.support import wait_until

NODE = "n1"


class ManualClock:
    """Wall and boot-time clocks the test moves by hand."""

    def __init__(self) -> None:
        self.wall = 1_800_000_000.0
        self.mono = 1_000.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


@dataclass
class ScriptedNode:
    """A node whose processes are whatever the test says; fails loudly on a real signal
    unless `allow_signals`."""

    clock: ManualClock = field(default_factory=ManualClock)
    name: str = NODE
    live: dict[int, LiveState] = field(default_factory=dict)
    raises: set[int] = field(default_factory=set)
    block: threading.Event | None = None
    allow_signals: bool = False
    signalled: list[tuple[int, str]] = field(default_factory=list)
    lingering: set[int] = field(default_factory=set)  # outlive a signal while they exist
    inspected: Any = None  # called with the PID after each inspection (the job acts on)
    events: list[tuple[str, int]] | None = None  # ("look", pid), (signal, pid) when given

    batches: list[int] = field(default_factory=list)  # each inspect-many call's size

    def inspect_many(self, targets: Sequence[Target]) -> list[LiveState]:
        self.batches.append(len(targets))
        return [self.inspect(target) for target in targets]

    def inspect(self, target: Target) -> LiveState:
        if target.pid in self.raises:
            raise RuntimeError("driver exploded")
        if self.block is not None:
            self.block.wait(10)
        seen = replace(self.live[target.pid], sampled_at=self.clock.wall)
        if self.inspected is not None:
            self.inspected(target.pid)
        if self.events is not None:
            self.events.append(("look", target.pid))
        return seen

    def alive(self, members: Any) -> list[Member]:
        return [m for m in members if m.pid in self.lingering and self.live[m.pid].exists]

    def gpu_processes(self, uuid: str) -> dict[int, int] | None:
        return {}

    def monitored_count(self) -> int | None:
        return 100

    def job_processes(self, job):  # type: ignore[no-untyped-def]
        return []

    rehearsed: list[int] = field(default_factory=list)  # each rehearse-many call's size

    def rehearse_many(self, rehearsals: Sequence[Rehearsal]) -> list[list[SignalResult]]:
        self.rehearsed.append(len(rehearsals))
        return [[] for _ in rehearsals]

    def signal_tree(self, target, members, sig, *, dry_run, key=None):  # type: ignore[no-untyped-def]
        if dry_run:
            return []
        if not self.allow_signals:
            raise AssertionError(f"{sig.name} sent to {target.pid}")
        self.signalled.append((target.pid, sig.name))
        if self.events is not None:
            self.events.append((sig.name, target.pid))
        return [SignalResult(target.pid, sig.name, True)]

    def wait_exit(self, timeout: float) -> None:
        pass


@dataclass
class ScriptedNotifier:
    delivered: bool = True
    sent: list[dict[str, Any]] = field(default_factory=list)
    followups: list[dict[str, Any]] = field(default_factory=list)
    block: threading.Event | None = None  # a slow channel: send waits until it is set
    refused: set[int] = field(default_factory=set)  # case ids whose notices fail
    events: list[tuple[str, int]] | None = None  # ("notice", case id) appended when given

    def send(self, notice: Any, *, dry_run: bool) -> NoticeResult:
        if dry_run:
            return NoticeResult(False, "dry run")
        self.sent.append(notice)
        if self.events is not None:
            self.events.append(("notice", notice.case))
        if self.block is not None:
            self.block.wait(30)
        delivered = self.delivered and notice.case not in self.refused
        return NoticeResult(delivered, "ok" if delivered else "HTTP 502")

    def followup(self, notice: dict[str, Any]) -> NoticeResult:
        self.followups.append(notice)
        return NoticeResult(True, "ok")


def idle_live(clock: ManualClock, pid: int, **over: Any) -> LiveState:
    base: dict[str, Any] = dict(
        sampled_at=clock.wall,
        exists=True,
        start_ticks=TICKS,
        boot_id=BOOT,
        start_time=clock.wall - 86400,  # the node's: boot time plus start ticks
        uid=1001,
        user="alice",
        gpu_found=True,
        on_gpu=True,
        gpu_memory_bytes=2 << 30,
        sm_util=0.0,
        cpu_seconds=10.0,
        members=(Member(pid, TICKS, 1001),),
    )
    base.update(over)
    return LiveState(**base)


def labels(pid: int) -> dict[str, str]:
    return {
        "alertname": "GpuProcessIdle",
        "reclaim": "true",
        "node": NODE,
        "pid": str(pid),
        "uuid": "GPU-0",
        "start_ticks": str(TICKS),
        "boot_id": BOOT,
    }


class Harness:
    def __init__(self, tmp_path: Path, database: str | None = None, **policy: Any) -> None:
        self.clock = ManualClock()
        self.config = ActuatorConfig.model_validate(
            merge_config(
                {
                    "mode": "enforce",
                    "notifier": {"webhook": {"url": "http://127.0.0.1:9/unused"}},
                    "defaults": {"grace": "60s", "term_timeout": "10s"},
                    "idle": {"cpu_window": "1s", "rearm_after": "300s"},
                    "protect": {"protect_root": False, "protected_uid_below": 0},
                    # Every tick (a second) re-checks each case, warned ones included.
                    "reconciler": {
                        "lease_ttl": "10s",
                        "stall_after": "30s",
                        "recheck_waiting": "1s",
                    },
                    "storage": {
                        "database": database or str(tmp_path / "db"),
                        "audit_log": str(tmp_path / "audit.jsonl"),
                    },
                },
                policy,
            )
        )
        self.store = open_store(self.config.storage.database)
        self.store.init()
        self.audit = AuditLog(self.config.storage.audit_log)
        self.node = ScriptedNode(self.clock)
        self.notifier = ScriptedNotifier()
        self.runtime = Runtime(
            self.config,
            self.store,
            self.audit,
            TOKEN,
            clock=lambda: self.clock.wall,
            mono=lambda: self.clock.mono,
            started_mono=self.clock.mono,
        )
        self.client = create_app(self.runtime).test_client()

    def reconciler(self, holder: str = "r1", others: dict[str, Any] | None = None) -> Reconciler:
        """The reconciler over this node and `others` (name -> node)."""
        return build_reconciler(
            self.config,
            self.store,
            self.audit,
            {NODE: self.node, **(others or {})},
            self.notifier,
            clock=lambda: self.clock.wall,
            mono=lambda: self.clock.mono,
            holder=holder,
        )

    def fire(self, *pids: int, status: str = "firing") -> None:
        alerts = [alert(labels=labels(p), fingerprint=f"fp{p}", status=status) for p in pids]
        r = self.client.post("/api/v1/alerts", json=body(*alerts), headers=AUTH)
        assert r.status_code == 200, r.json

    def state(self, pid: int) -> State:
        (case,) = [
            c
            for c in self.store.list_cases(limit=100)
            if c.pid == pid
            and (c.state in (State.PENDING, State.NOTIFIED, State.DEFERRED) or c.followup is None)
        ]
        return case.state

    def cases(self, pid: int) -> list[Any]:
        return sorted(
            (c for c in self.store.list_cases(limit=100) if c.pid == pid), key=lambda c: c.id
        )

    def events(self) -> list[dict[str, Any]]:
        return self.audit.tail(1000)

    def run(self, r: Reconciler, ticks: int = 1, step: float = 1.0) -> None:
        for _ in range(ticks):
            assert r.tick()
            self.clock.advance(step)


@pytest.mark.reliability(13)
def test_one_case_that_fails_never_blocks_the_others(tmp_path: Path, database: str) -> None:
    h = Harness(tmp_path, database)
    h.node.live = {p: idle_live(h.clock, p) for p in (101, 102)}
    h.node.raises = {101}
    h.fire(101, 102)
    r = h.reconciler()
    h.run(r, ticks=3)
    assert h.cases(102)[0].state == State.NOTIFIED  # advanced despite 101
    assert h.cases(101)[0].state == State.PENDING
    errors = [e for e in h.events() if e["event"] == "step_error"]
    assert errors and errors[0]["case"] == h.cases(101)[0].id
    assert h.client.get("/-/ready").status_code == 200  # ticks still finish


def test_ready_reports_a_reconciler_that_makes_no_progress(tmp_path: Path, database: str) -> None:
    h = Harness(tmp_path, database)
    r = h.reconciler()
    h.run(r)
    assert h.client.get("/-/ready").status_code == 200
    # A holder that stopped finishing passes (hung), still holding a lease:
    h.store.acquire_lease("hung", h.clock.mono + 100, ttl=1e6)
    h.clock.advance(31)
    ready = h.client.get("/-/ready")
    assert ready.status_code == 503 and "advanced" in " ".join(ready.json["reasons"])


@pytest.mark.reliability(36)
def test_a_reconciler_that_lost_its_lease_mid_tick_does_not_act(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database)
    h.node.live = {101: idle_live(h.clock, 101)}
    h.fire(101)
    slow, fast = h.reconciler("slow"), h.reconciler("fast")
    h.run(slow, ticks=2)  # one CPU window sampled: the next step is the notice
    h.node.block = threading.Event()
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(slow.tick()))
    thread.start()
    time.sleep(0.2)  # slow is inside inspect() for the case, holding a lease that expires
    h.clock.advance(11)
    h.node.block.set()
    h.node.block = None
    assert fast.tick()  # took the expired lease... (and may act itself)
    thread.join(10)
    assert result == [False]
    notices = [e for e in h.events() if e["event"] == "notice"]
    decisions = [e for e in h.events() if e["event"] == "decision" and e.get("to") == "notified"]
    aborted = [e for e in h.events() if e["event"] == "decision_aborted"]
    assert len(notices) == len(h.notifier.sent) <= 1, "two reconcilers notified"
    carried = {d["decision_id"] for d in decisions} - {a["decision_id"] for a in aborted}
    assert len(carried) == len(h.notifier.sent)  # every decision not aborted was carried out


@pytest.mark.reliability(62)
def test_defect_7_a_rearmed_case_does_not_inherit_the_owners_release(
    tmp_path: Path, database: str
) -> None:
    """The owner chose "release now" on case 1; activity cancelled it; the re-armed case 2
    is warned afresh and runs its whole grace (60 s): no SIGTERM a second after its notice."""
    h = Harness(tmp_path, database)
    h.node.live = {101: idle_live(h.clock, 101)}
    h.node.allow_signals = True
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=3)
    (first,) = h.cases(101)
    assert first.state == State.NOTIFIED
    released = operations.release(h.runtime, first.id)
    assert not isinstance(released, operations.Refused)
    h.node.live[101] = idle_live(h.clock, 101, cpu_seconds=12.0)  # it works again
    h.run(r, ticks=1)
    assert h.cases(101)[0].state == State.CANCELLED
    h.clock.advance(301)
    h.run(r, ticks=4)
    first, second = h.cases(101)
    assert second.rearmed_from == first.id and second.state == State.NOTIFIED
    assert second.release_requested_mono is None
    h.run(r, ticks=20)
    assert h.node.signalled == []  # the grace is 60 s
    assert h.cases(101)[1].state == State.NOTIFIED


def test_activity_ends_a_case_but_it_rearms_while_the_alert_fires(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database)
    h.node.live = {101: idle_live(h.clock, 101)}
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=2)
    h.node.live[101] = idle_live(h.clock, 101, cpu_seconds=12.0)  # a 2-core blip
    h.run(r, ticks=2)
    (first,) = h.cases(101)
    assert first.state == State.CANCELLED and first.reason_code == "activity"
    h.node.live[101] = idle_live(h.clock, 101, cpu_seconds=12.0)
    h.run(r, ticks=10)
    assert len(h.cases(101)) == 1  # not before the idle window has passed
    h.clock.advance(300)
    h.run(r, ticks=3)
    first, second = h.cases(101)
    assert first.followup == second.id and second.rearmed_from == first.id
    assert second.state in (State.PENDING, State.NOTIFIED)
    rearmed = [e for e in h.events() if e["event"] == "decision" and e["action"] == "rearmed"]
    assert [e["case"] for e in rearmed] == [second.id]  # the record names the new case
    h.fire(101, status="resolved")  # the alert resolves: nothing re-arms again
    h.run(r, ticks=2)
    assert h.cases(101)[-1].state == State.CANCELLED
    h.clock.advance(600)
    h.run(r, ticks=2)
    assert len(h.cases(101)) == 2


@pytest.mark.reliability(39)
def test_an_undelivered_notice_never_starts_the_grace(tmp_path: Path, database: str) -> None:
    h = Harness(tmp_path, database, notice={"retries": 2, "retry_interval": "30s"})
    h.notifier.delivered = False
    h.node.live = {101: idle_live(h.clock, 101)}
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=200, step=1.0)  # far past grace + term_timeout
    (case,) = h.cases(101)
    assert case.state == State.REFUSED and case.reason_code == "notice_undelivered", case
    assert len(h.notifier.sent) == 3 and h.node.signalled == []


def test_a_delivered_notice_after_a_failure_starts_the_grace(tmp_path: Path, database: str) -> None:
    h = Harness(tmp_path, database, notice={"retries": 2, "retry_interval": "30s"})
    h.notifier.delivered = False
    h.node.live = {101: idle_live(h.clock, 101)}
    h.node.allow_signals = True
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=3)
    assert len(h.notifier.sent) == 1
    h.notifier.delivered = True
    h.run(r, ticks=35)  # the retry at +30 s is delivered: the grace starts there
    (case,) = h.cases(101)
    assert case.state == State.NOTIFIED and case.notified_mono is not None
    h.run(r, ticks=62)
    assert h.node.signalled == [(101, "SIGTERM")]


@pytest.mark.reliability(42)
def test_a_wall_clock_step_changes_no_wait(tmp_path: Path, database: str) -> None:
    h = Harness(tmp_path, database)
    h.notifier.delivered = True
    h.node.live = {101: idle_live(h.clock, 101)}
    h.node.allow_signals = True
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=3)
    assert h.cases(101)[0].state == State.NOTIFIED
    h.clock.wall += 3600  # NTP or a human steps the clock by an hour
    h.run(r, ticks=5)
    assert h.node.signalled == [], "a +1 h step cut the 60 s grace short"
    h.run(r, ticks=60)
    assert h.node.signalled == [(101, "SIGTERM")]


def test_a_warned_case_is_rechecked_every_few_seconds_and_signalled_on_a_fresh_look(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database, reconciler={"recheck_waiting": "10s"})
    h.node.live = {101: idle_live(h.clock, 101)}
    h.node.allow_signals = True
    looked: list[float] = []
    h.node.inspected = lambda pid: looked.append(h.clock.mono)
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=3)
    (case,) = h.cases(101)
    assert case.state == State.NOTIFIED and case.notified_mono is not None
    looked.clear()
    h.run(r, ticks=50)  # 50 s of the 60 s grace, a tick a second
    assert len(looked) == 5, looked  # every 10 s, not at every tick
    h.run(r, ticks=15)
    assert h.node.signalled == [(101, "SIGTERM")]
    (case,) = h.cases(101)
    deadline = case.notified_mono + 60
    assert deadline <= case.term_mono < deadline + 1  # not a tick past the deadline
    # Decided on a re-check at that tick, and looked at once more before the signal:
    assert looked.count(case.term_mono) == 2


def test_a_node_s_due_cases_are_re_checked_in_one_call_and_a_late_answer_asked_again(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database)
    pids = (101, 102, 103)
    h.node.live = {p: idle_live(h.clock, p) for p in pids}
    looks: list[int] = []
    h.node.inspected = looks.append
    h.fire(*pids)
    r = h.reconciler()
    h.run(r)
    assert h.node.batches == [3] and sorted(looks) == list(pids)  # one call, each looked at once
    # An answer that took longer than BATCHED_FRESH_FOR is old news: the first case is
    # looked at alone, and the node's other due cases are asked again, together.
    h.node.batches, looks[:] = [], []
    late = [BATCHED_FRESH_FOR + 1]

    def slow(pid: int) -> None:
        looks.append(pid)
        if late:
            h.clock.advance(late.pop())

    h.node.inspected = slow
    h.run(r)
    assert h.node.batches == [3, 2] and sorted(looks) == sorted(pids * 2)
    assert {h.state(p) for p in pids} == {State.NOTIFIED}


def test_in_observe_mode_a_node_s_rehearsals_of_a_pass_go_in_one_call(
    tmp_path: Path, database: str
) -> None:
    """Each observed case rehearses the signal enforcement would send (a dry run through
    the node, each tree verified): a node's rehearsals of a pass are one round trip, not
    one per case; nothing is sent."""
    h = Harness(tmp_path, database, mode="observe")
    pids = (101, 102, 103)
    h.node.live = {p: idle_live(h.clock, p) for p in pids}
    h.fire(*pids)
    r = h.reconciler()
    h.run(r, ticks=5)
    assert {h.state(p) for p in pids} == {State.OBSERVED}
    assert h.node.rehearsed == [3] and h.node.signalled == []


def test_a_node_whose_every_re_check_is_slow_is_not_asked_again_and_again(
    tmp_path: Path, database: str
) -> None:
    """Every batch comes back older than it stays fresh: the batches stop once they have
    asked twice what asking one by one would, and the rest of the cases ask alone."""
    h = Harness(tmp_path, database)
    pids = (101, 102, 103, 104)
    h.node.live = {p: idle_live(h.clock, p) for p in pids}
    looks: list[int] = []

    def slow(pid: int) -> None:
        looks.append(pid)
        h.clock.advance(BATCHED_FRESH_FOR * 0.4)  # a batch of 3 or 4 comes back stale

    h.node.inspected = slow
    h.fire(*pids)
    h.run(h.reconciler())
    assert h.node.batches == [4, 3]  # then 2 more would pass 2 x 4: each alone
    assert len(looks) == 4 + 1 + 3 + 1 + 1 + 1


def test_a_new_case_is_looked_at_again_once_its_cpu_window_is_full(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database, idle={"cpu_window": "3s"})
    h.node.live = {101: idle_live(h.clock, 101)}
    looked: list[float] = []
    h.node.inspected = lambda pid: looked.append(h.clock.mono)
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=2)  # the first look opens the window; the next tick is inside it
    assert len(looked) == 1 and h.cases(101)[0].state == State.PENDING
    h.run(r, ticks=2)  # three seconds since the first look: judged idle and warned
    assert looked == [looked[0], looked[0] + 3]
    assert h.cases(101)[0].state == State.NOTIFIED


def test_a_process_in_two_trees_decided_in_one_pass_gets_one_sigterm(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database)
    family = (Member(101, TICKS, 1001), Member(102, TICKS, 1001))
    h.node.live = {101: idle_live(h.clock, 101, members=family), 102: idle_live(h.clock, 102)}
    h.node.allow_signals = True
    h.fire(101, 102)  # the parent and its DataLoader worker, each flagged
    r = h.reconciler()
    h.run(r, ticks=3)
    assert {h.state(101), h.state(102)} == {State.NOTIFIED}
    signals_at: list[list[tuple[int, str]]] = []
    for _ in range(70):
        h.run(r)
        signals_at.append(list(h.node.signalled))
    first = next(s for s in signals_at if s)
    assert len(first) == 1, first  # the other case waits while the first tree is signalled


def test_a_pass_s_decisions_are_synced_and_committed_together_before_any_is_carried_out(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database)
    h.node.live = {p: idle_live(h.clock, p) for p in (101, 102, 103)}
    h.node.allow_signals = True
    h.fire(101, 102, 103)
    r = h.reconciler()
    synced: list[list[str]] = []  # the decisions in each fsync'd audit write
    committed: list[int] = []  # notices already sent at each commit of decisions
    write_many, transition_many = h.audit.write_many, h.store.transition_many

    def audit_write(records: list[Any], *, sync: bool = True) -> Any:
        if sync:
            synced.append([str(x.to) for x in records if isinstance(x, DecisionMade)])
        return write_many(records, sync=sync)

    def commit(moves: Any, fence: Any = None) -> list[bool]:
        committed.append(len(h.notifier.sent))
        return transition_many(moves, fence)

    h.audit.write_many = audit_write  # type: ignore[method-assign]
    h.store.transition_many = commit  # type: ignore[method-assign]
    h.run(r, ticks=3)
    assert {h.state(p) for p in (101, 102, 103)} == {State.NOTIFIED}
    assert ["notified"] * 3 in synced and committed == [0]  # one fsync, one commit, then notices
    assert len(h.notifier.sent) == 3
    synced.clear()
    committed.clear()
    h.run(r, ticks=62)  # past the 60 s grace: each SIGTERM is committed and sent on its own
    assert sorted(h.node.signalled) == [(p, "SIGTERM") for p in (101, 102, 103)]
    assert [d for d in synced if "terminating" in d] == [["terminating"]] * 3


def test_nothing_comes_between_a_sigterm_s_last_look_and_its_signal(
    tmp_path: Path, database: str
) -> None:
    """A notice decided earlier in the same pass (a retry here) goes out before the SIGTERM's
    last look, not between it and the signal (a notice can take seconds)."""
    h = Harness(tmp_path, database, notice={"retries": 100, "retry_interval": "1s"})
    h.node.live = {p: idle_live(h.clock, p) for p in (101, 102)}
    h.node.allow_signals = True
    h.fire(101, 102)
    r = h.reconciler()
    h.run(r)  # the cases open: their first CPU window
    first = h.cases(101)[0].id
    h.notifier.refused = {first}  # 101's notice keeps failing: retried at every tick
    h.run(r)
    (warned,) = h.cases(102)
    assert warned.notified_mono is not None and h.cases(101)[0].notified_mono is None
    deadline = warned.notified_mono + 60
    while h.clock.mono < deadline:
        h.run(r)
    assert h.node.signalled == []
    events: list[tuple[str, int]] = []
    h.node.events = h.notifier.events = events
    h.notifier.refused = set()  # 101's retry, decided before 102's SIGTERM in this pass
    h.run(r)
    assert ("SIGTERM", 102) in events and ("notice", first) in events, events
    signal_at = events.index(("SIGTERM", 102))
    assert events[signal_at - 1] == ("look", 102), events  # the last look, then the signal
    assert events.index(("notice", first)) < signal_at - 1


def test_a_warned_case_that_works_again_is_cancelled_within_the_recheck_interval(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database, reconciler={"recheck_waiting": "10s"})
    h.node.live = {101: idle_live(h.clock, 101)}
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=3)
    assert h.cases(101)[0].state == State.NOTIFIED
    h.run(r, ticks=4)
    h.node.live[101] = idle_live(h.clock, 101, cpu_seconds=40.0)  # 30 CPU seconds at once
    h.run(r, ticks=10)
    (case,) = h.cases(101)
    assert case.state == State.CANCELLED and case.reason_code == "activity"
    assert h.node.signalled == []


@pytest.mark.reliability(9)
def test_an_alert_for_another_node_is_refused(tmp_path: Path, database: str) -> None:
    h = Harness(tmp_path, database)
    other = {**labels(101), "node": "gpu-node-99"}
    r = h.client.post("/api/v1/alerts", json=body(alert(labels=other)), headers=AUTH)
    assert r.status_code == 200
    h.run(h.reconciler())
    (case,) = h.cases(101)
    assert case.state == State.REFUSED and case.reason_code == "unknown_node"


@pytest.mark.reliability(10, 11)
def test_unknown_fields_are_accepted_and_truncation_resolves_nothing(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database)
    h.node.live = {101: idle_live(h.clock, 101)}
    extra = alert(labels=labels(101), fingerprint="fp101", routeLabels={"a": "b"})
    payload = body(extra, truncatedAlerts=7, notification_reason="new", futureField=[1])
    assert h.client.post("/api/v1/alerts", json=payload, headers=AUTH).status_code == 200
    r = h.reconciler()
    h.run(r, ticks=3)
    # A later delivery without it (truncated away) is not a resolution.
    assert (
        h.client.post("/api/v1/alerts", json=body(truncatedAlerts=1), headers=AUTH).status_code
        == 200
    )
    h.run(r, ticks=2)
    assert h.cases(101)[0].state == State.NOTIFIED


@pytest.mark.reliability(43)
def test_every_decision_record_carries_trace_target_evidence_and_timing(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database)
    h.node.live = {101: idle_live(h.clock, 101)}
    h.fire(101)
    h.run(h.reconciler(), ticks=3)
    records = [e for e in h.events() if e["event"] == "decision"]
    assert all(r["case"] and r["decision_id"] and r["decided_at"] for r in records)
    # Those made on a live re-check (not the case's creation) carry its evidence:
    decisions = [r for r in records if r["action"] not in ("created", "rearmed")]
    assert decisions
    for record in decisions:
        assert record["alert"] == {
            "fingerprint": "fp101",
            "starts_at": record["alert"]["starts_at"],
        }
        assert {"node", "pid", "start_ticks", "boot_id", "uid", "uuid", "user"} <= record.keys()
        assert record["decision_id"] and record["decided_at"] and "timings" in record
        assert record["live"]["gpu_memory_bytes"] == 2 << 30 and "thresholds" in record


def test_the_created_record_names_its_case_and_no_case_exists_without_one(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database)
    h.node.live = {p: idle_live(h.clock, p) for p in (101, 102)}
    h.fire(101, 102)
    h.run(h.reconciler())
    created = [e for e in h.events() if e["event"] == "decision" and e["action"] == "created"]
    ids = sorted(c.id for p in (101, 102) for c in h.cases(p))
    assert sorted(e["case"] for e in created) == ids and all(ids)
    assert {e["pid"]: e["case"] for e in created} == {p: h.cases(p)[0].id for p in (101, 102)}

    def refuse(records: list[dict[str, Any]], *, sync: bool = True) -> None:
        from actuator.audit import AuditError

        raise AuditError("disk full")

    h.fire(103)
    h.node.live[103] = idle_live(h.clock, 103)
    h.audit.write_many = refuse  # type: ignore[method-assign]
    h.run(h.reconciler())
    assert h.cases(103) == []  # the audit write failed: the case was not created either


def test_a_node_slow_to_answer_does_not_hold_the_other_nodes_up(
    tmp_path: Path, database: str
) -> None:
    h = Harness(tmp_path, database)
    slow = ScriptedNode(h.clock, name="a-slow-node", block=threading.Event())
    h.node.live = {101: idle_live(h.clock, 101)}
    slow.live = {102: idle_live(h.clock, 102)}
    on_slow = alert(labels={**labels(102), "node": "a-slow-node"}, fingerprint="fp102")
    assert h.client.post("/api/v1/alerts", json=body(on_slow), headers=AUTH).status_code == 200
    h.fire(101)  # after the slow node's case: in turn, it would wait behind it
    r = h.reconciler(others={"a-slow-node": slow})
    ticking = threading.Thread(target=r.tick)
    ticking.start()
    try:
        # While the slow node has not answered, the other node's case got its first sample.
        wait_until(lambda: h.cases(101) and h.cases(101)[0].cpu_at is not None, 5)
        assert ticking.is_alive() and h.cases(102)[0].cpu_at is None
    finally:
        assert slow.block is not None
        slow.block.set()
        ticking.join(10)
    assert h.cases(102)[0].cpu_at is not None


def test_a_worker_flagged_on_its_own_gets_no_second_sigterm_after_its_parents_tree(
    tmp_path: Path, database: str
) -> None:
    """Found by the hour of chaos (docs/reliability.md): a DataLoader worker holds GPU
    memory of its own, so it has its own case beside its parent's; the parent's tree
    SIGTERM reached it, and its own case sent it SIGTERM again 14 ms later."""
    h = Harness(tmp_path, database)
    parent, worker = 101, 102
    h.node.allow_signals = True
    h.node.live = {
        parent: idle_live(
            h.clock, parent, members=(Member(worker, TICKS, 1001), Member(parent, TICKS, 1001))
        ),
        worker: idle_live(h.clock, worker),
    }
    h.fire(parent, worker)
    r = h.reconciler()
    for _ in range(200):
        h.run(r)
        if h.node.signalled:
            break
    assert h.node.signalled == [(parent, "SIGTERM")]  # the tree, the worker in it: once
    assert h.cases(worker)[0].state == State.NOTIFIED  # its own SIGTERM waits
    # The worker exits with its parent's tree; its own case ends without a signal.
    h.node.live[worker] = idle_live(h.clock, worker, exists=False)
    h.run(r, ticks=5)
    assert h.node.signalled == [(parent, "SIGTERM")]
    assert h.cases(worker)[0].state not in (State.TERMINATING, State.KILLING, State.NOTIFIED)
    assert h.cases(parent)[0].state == State.RECLAIMED


def test_a_case_refused_while_evidence_was_unknown_is_asked_again_while_the_alert_fires(
    tmp_path: Path, database: str
) -> None:
    """Found by the hour of chaos (docs/reliability.md): a case refused because NVML was
    down for a few seconds was final, so its idle process was never looked at again."""
    h = Harness(tmp_path, database)
    h.node.live = {101: idle_live(h.clock, 101, on_gpu=None, errors=("NVML is down",))}
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=2)
    (first,) = h.cases(101)
    assert first.state == State.REFUSED and first.reason_code == "unknown_evidence"
    h.node.live[101] = idle_live(h.clock, 101)  # NVML is back
    h.run(r, ticks=3)
    assert len(h.cases(101)) == 1  # not before the window has passed
    h.clock.advance(300)
    h.run(r, ticks=3)
    first, second = h.cases(101)
    assert first.followup == second.id and second.state in (State.PENDING, State.NOTIFIED)
    (rearmed,) = [e for e in h.events() if e["event"] == "decision" and e["action"] == "rearmed"]
    assert rearmed["case"] == second.id
    assert f"after case {first.id} ended (unknown_evidence)" in rearmed["reason"]


def test_evidence_that_stays_unknown_is_asked_again_less_often_but_never_given_up(
    tmp_path: Path, database: str
) -> None:
    """Per-process utilisation unsupported for good: each refusal in a row doubles the wait
    before the next re-arm (300, 600, 1200 s, then 2400 s at most), so the audit does not
    fill with one refusal every window forever, and the process is still asked."""
    h = Harness(tmp_path, database)
    h.node.live = {101: idle_live(h.clock, 101, on_gpu=None, errors=("NVML is down",))}
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=2)
    gaps = []
    for _ in range(5):
        (*_, last) = h.cases(101)
        assert last.state == State.REFUSED and last.reason_code == "unknown_evidence"
        waited = 0
        while len(h.cases(101)) == len(gaps) + 1:
            h.clock.advance(100)
            waited += 100
            h.run(r, ticks=2)
            assert waited <= 5000, "never re-armed"
        gaps.append(waited)
    assert gaps == [300, 600, 1200, 2400, 2400]


def test_a_parent_whose_worker_was_signalled_by_its_own_case_waits_until_the_worker_exited(
    tmp_path: Path, database: str
) -> None:
    """The other order of the chaos finding: the worker's own case reaches SIGTERM first;
    the parent's tree signal (which would reach the worker a second time) waits until the
    worker has exited, then goes on."""
    h = Harness(tmp_path, database, defaults={"term_timeout": "120s"})
    parent, worker = 101, 102
    h.node.allow_signals = True
    h.node.lingering = {worker}  # it finishes its batch before it exits
    h.node.live = {
        parent: idle_live(
            h.clock, parent, members=(Member(worker, TICKS, 1001), Member(parent, TICKS, 1001))
        ),
        worker: idle_live(h.clock, worker),
    }
    r = h.reconciler()
    h.fire(worker)
    h.run(r, ticks=20)  # the worker's grace is 20 s ahead of its parent's
    h.fire(parent)
    for _ in range(200):
        h.run(r)
        if h.node.signalled:
            break
    assert h.node.signalled == [(worker, "SIGTERM")]
    # Well past the parent's grace, while the worker lives on after its SIGTERM: no tree
    # signal that would reach it again.
    h.run(r, ticks=40)
    assert h.node.signalled == [(worker, "SIGTERM")]
    (parent_case,) = h.cases(parent)
    assert parent_case.state == State.NOTIFIED
    assert parent_case.notified_mono is not None
    assert h.clock.mono - parent_case.notified_mono > 60  # its 60 s grace is over
    h.node.live[worker] = idle_live(h.clock, worker, exists=False)
    for _ in range(60):
        h.run(r)
        if len(h.node.signalled) > 1:
            break
    assert h.node.signalled == [(worker, "SIGTERM"), (parent, "SIGTERM")]


def _slow_notice_pass(h: Harness) -> tuple[threading.Thread, threading.Event]:
    """r1's pass stuck in a notice that takes long (a mail server, a picture), its lease
    kept by its keeper thread (ticking every 10 ms of real time)."""
    h.node.live = {101: idle_live(h.clock, 101)}
    h.fire(101)
    h.notifier.block = threading.Event()
    r1 = h.reconciler("r1")
    stop = threading.Event()
    threading.Thread(target=r1.keep_lease, args=(stop, 0.01), daemon=True).start()

    def passes() -> None:  # until the pass that sends the notice (it waits in it)
        while not h.notifier.sent:
            r1.tick()
            if not h.notifier.sent:
                h.clock.advance(1)

    passing = threading.Thread(target=passes, daemon=True)
    passing.start()
    wait_until(lambda: h.notifier.sent, 10)
    return passing, stop


def test_a_notice_slower_than_the_lease_is_not_sent_again_by_another_worker(
    tmp_path: Path, database: str
) -> None:
    """A notice may wait longer than the lease (10 s here) for its channel; the worker
    sending it keeps its lease meanwhile, so another worker never takes the case over and
    sends the notice a second time."""
    h = Harness(tmp_path, database)
    passing, stop = _slow_notice_pass(h)
    r2 = h.reconciler("r2")
    try:
        for _ in range(5):  # 25 s of the notice, 2.5 leases
            h.clock.advance(5)
            time.sleep(0.1)  # the keeper's turn
            assert not r2.tick()
        assert len(h.notifier.sent) == 1
    finally:
        assert h.notifier.block is not None
        h.notifier.block.set()
        passing.join(10)
        stop.set()
    (case,) = h.cases(101)
    assert case.state == State.NOTIFIED and case.notified_mono is not None
    assert len(h.notifier.sent) == 1  # one notice, recorded by the worker that sent it


def test_a_pass_stuck_past_stall_after_hands_the_lease_over(tmp_path: Path, database: str) -> None:
    """Kept alive, but not forever: a pass running past reconciler.stall_after (30 s) is
    wedged, and another worker takes over once the lease runs out."""
    h = Harness(tmp_path, database)
    passing, stop = _slow_notice_pass(h)
    try:
        for _ in range(6):  # 30 s: kept
            h.clock.advance(5)
            time.sleep(0.1)
            assert not h.store.acquire_lease("r2", h.clock.mono, 10.0)
        h.clock.advance(11)  # past stall_after and then the lease's 10 s
        time.sleep(0.1)
        assert h.store.acquire_lease("r2", h.clock.mono, 10.0)  # handed over
    finally:
        assert h.notifier.block is not None
        h.notifier.block.set()
        passing.join(10)
        stop.set()


def test_a_job_that_resumes_between_the_recheck_and_its_sigterm_is_not_signalled(
    tmp_path: Path, database: str
) -> None:
    """Found by the hour of chaos: the step's re-check is read before it waits its turn
    (other cases' commits); a job that wrote its log in between got SIGTERM. The last look
    under the lock sees the write, and the case ends for activity without a signal."""
    h = Harness(tmp_path, database)
    h.node.allow_signals = True
    h.node.live = {101: idle_live(h.clock, 101)}
    h.fire(101)
    r = h.reconciler()
    h.run(r, ticks=3)
    assert h.state(101) == State.NOTIFIED

    def resume(pid: int) -> None:  # right after the re-check of the SIGTERM step
        h.node.live[pid] = idle_live(h.clock, pid, log_mtime=h.clock.wall)
        h.node.inspected = None

    h.clock.advance(60)  # the grace is over: this step's re-check decides SIGTERM
    h.node.inspected = resume
    h.run(r)
    assert h.node.signalled == []
    (case,) = h.cases(101)
    assert case.state == State.CANCELLED and case.reason_code == "activity"
    assert "last look" in case.reason


def test_the_records_of_what_a_pass_did_are_synced_when_it_ends(
    tmp_path: Path, database: str
) -> None:
    """Notices and signals are recorded after they happen without an fsync each; the pass
    fsyncs them together before it ends (every decision record was before its effect)."""
    h = Harness(tmp_path, database)
    h.node.allow_signals = True
    h.node.live = {101: idle_live(h.clock, 101)}
    h.fire(101)
    r = h.reconciler()
    for _ in range(200):
        h.run(r)
        if h.node.signalled:
            break
    assert h.node.signalled == [(101, "SIGTERM")]
    events = [e["event"] for e in h.events()]
    assert "notice" in events and "signals" in events
    assert h.audit.unsynced_files == 0


@pytest.mark.reliability(63)
def test_defect_8_ready_says_so_while_nothing_can_be_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database's volume is full: reads still work (so a ping passes) but every webhook
    answers 503 and every commit fails; `/-/ready` answers 503 naming the store, and ready
    again once space is back (the hold shortened here from 15 s)."""
    volume = tmp_path / "small"
    volume.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(volume)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        monkeypatch.setattr(database_module, "WRITE_FAILURE_HOLD_S", 1.0)
        h = Harness(tmp_path, str(volume / "db.sqlite"))
        h.fire(100)
        assert h.client.get("/-/ready").status_code == 200
        filler = volume / "filler"
        with contextlib.suppress(OSError), filler.open("ab", buffering=0) as out:
            while True:
                out.write(b"\0" * 4096)
        answers = []
        for pid in range(101, 401):
            alerts = [alert(labels=labels(pid), fingerprint=f"fp{pid}-{'x' * 2000}")]
            answers.append(h.client.post("/api/v1/alerts", json=body(*alerts), headers=AUTH))
            if answers[-1].status_code == 503:
                break
        assert answers[-1].status_code == 503, "the full volume never refused a webhook"
        ready = h.client.get("/-/ready")
        assert ready.status_code == 503
        assert "could not commit" in " ".join(ready.json["reasons"])
        filler.unlink()
        time.sleep(1.1)
        assert h.client.get("/-/ready").status_code == 200
        h.fire(500)  # and it records again
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False)


def both_notified(h: Harness, other: ScriptedNode) -> Reconciler:
    """Case 101 on the harness's node and 102 on `other` ("n2"), alerted and each warned
    by the reconciler over both nodes, which is returned."""
    on_other = alert(labels={**labels(102), "node": "n2"}, fingerprint="fp102")
    assert h.client.post("/api/v1/alerts", json=body(on_other), headers=AUTH).status_code == 200
    h.fire(101)
    r = h.reconciler(others={"n2": other})
    h.run(r, ticks=3)
    assert {h.state(101), h.state(102)} == {State.NOTIFIED}
    return r


def test_two_nodes_steps_that_read_before_either_s_turn_take_one_sigterm_under_a_limit_of_one(
    tmp_path: Path, database: str
) -> None:
    """Both steps read their guard (no SIGTERM yet) before either takes its turn; the
    second at its turn sees the first's SIGTERM and is held back by the limit."""
    h = Harness(tmp_path, database, limits={"terminations_per_minute": 1})
    other = ScriptedNode(h.clock, name="n2", allow_signals=True)
    h.node.allow_signals = True
    h.node.live = {101: idle_live(h.clock, 101)}
    other.live = {102: idle_live(h.clock, 102)}
    r = both_notified(h, other)
    h.clock.advance(61)  # past the grace: each step's next decision is its SIGTERM
    both_read = threading.Barrier(2, timeout=10)
    counted = CountedGuardReads(h.store, before=lambda n: both_read.wait() if n <= 2 else None)
    h.run(r)
    assert counted.reads == 3  # the second step read again at its turn
    signalled = h.node.signalled + other.signalled
    assert [s for _, s in signalled] == ["SIGTERM"], signalled
    held = 102 if h.node.signalled else 101
    (case,) = [c for c in h.cases(held) if c.state == State.DEFERRED]
    assert case.reason_code == "limit_minute"


def test_a_slow_notice_on_one_node_does_not_hold_another_node_s_steps(
    tmp_path: Path, database: str
) -> None:
    """Each node's notice waits until the other's is under way too (a slow mail server):
    both are sent, as a node's notices are carried out outside the reconciler's turn. Were
    they carried out in it, the second node's step would wait for the first's notice, the
    barrier would break after 10 s, and neither would be sent."""
    h = Harness(tmp_path, database)
    other = ScriptedNode(h.clock, name="n2")
    h.node.live = {101: idle_live(h.clock, 101)}
    other.live = {102: idle_live(h.clock, 102)}
    both_sending = threading.Barrier(2, timeout=10)
    send = h.notifier.send

    def slow_send(notice: Any, *, dry_run: bool) -> NoticeResult:
        both_sending.wait()
        return send(notice, dry_run=dry_run)

    h.notifier.send = slow_send  # type: ignore[method-assign]
    both_notified(h, other)
    assert sorted(n.case for n in h.notifier.sent) == sorted(
        c.id for pid in (101, 102) for c in h.cases(pid)
    )
    assert {h.state(101), h.state(102)} == {State.NOTIFIED}


class CheckpointingNode(ScriptedNode):
    """A node whose driver checkpoints: each suspend call runs `during` first (the copy)."""

    def __init__(self, clock: ManualClock, during: Any) -> None:
        super().__init__(clock, allow_signals=True)
        self.during, self.suspended = during, list[int]()

    def suspend(self, target: Target, lock_timeout: float, *, key: str | None = None) -> Any:
        self.during()
        self.suspended.append(target.pid)
        return CheckpointResult(True, "checkpointed", "ok")


def test_one_node_s_checkpoint_does_not_hold_another_node_s_sigterm(
    tmp_path: Path, database: str
) -> None:
    """A checkpoint's copy may take minutes. n1's copy waits until n2's SIGTERM is sent,
    and n2 is looked at only once n1's copy has begun: both go through, as a checkpoint is
    carried out after the turn. Were it carried out in the turn, n2's step could not
    decide its SIGTERM until n1's copy gave up after 10 s, and n1 would not be suspended."""
    h = Harness(tmp_path, database, defaults={"suspend": True, "suspend_host_reserve": "0"})
    copying, terminated = threading.Event(), threading.Event()

    def copy() -> None:
        copying.set()
        assert terminated.wait(10), "n2's SIGTERM waited for n1's checkpoint"

    h.node = CheckpointingNode(h.clock, copy)
    other = ScriptedNode(h.clock, name="n2", allow_signals=True)
    real_signal, real_inspect = other.signal_tree, other.inspect
    after_grace = threading.Event()

    def signal_tree(*args: Any, **kw: Any) -> Any:
        sent = real_signal(*args, **kw)
        if not kw.get("dry_run"):
            terminated.set()
        return sent

    def inspect(target: Target) -> LiveState:
        if after_grace.is_set():
            copying.wait(10)  # n1's copy first
        return real_inspect(target)

    other.signal_tree = signal_tree  # type: ignore[method-assign]
    other.inspect = inspect  # type: ignore[method-assign]
    checkpointable = dict(
        checkpoint_state="running",
        mps_on_gpu=False,
        gpu_used_bytes=4 << 30,
        host_memory_available=64 << 30,
    )
    h.node.live = {101: idle_live(h.clock, 101, **checkpointable)}
    other.live = {102: idle_live(h.clock, 102)}  # no checkpoint: its next rung is SIGTERM
    r = both_notified(h, other)
    h.clock.advance(61)  # past the grace
    after_grace.set()
    h.run(r)
    assert h.node.suspended == [101]
    assert [s for _, s in other.signalled] == ["SIGTERM"]
    assert h.state(102) == State.TERMINATING
    assert [c.state for c in h.cases(101)] == [State.SUSPENDING]


def test_a_node_s_checkpoints_are_copied_outside_the_turn_each_before_its_next_step(
    tmp_path: Path, database: str
) -> None:
    """Two cases on one node reach their checkpoint in the same pass: each copy is made
    with the turn free (another node's steps go on), and the node's next case is decided
    only after the copy before it."""
    h = Harness(tmp_path, database, defaults={"suspend": True, "suspend_host_reserve": "0"})
    seen: list[tuple[int, bool, State | None]] = []
    r: Reconciler | None = None

    def copy() -> None:
        assert r is not None
        seen.append((len(seen), r._acting.locked(), h.state(102)))

    h.node = CheckpointingNode(h.clock, copy)
    checkpointable = dict(
        checkpoint_state="running",
        mps_on_gpu=False,
        gpu_used_bytes=4 << 30,
        host_memory_available=64 << 30,
    )
    h.node.live = {p: idle_live(h.clock, p, **checkpointable) for p in (101, 102)}
    h.fire(101, 102)
    r = h.reconciler()
    h.run(r, ticks=3)
    assert {h.state(101), h.state(102)} == {State.NOTIFIED}
    h.clock.advance(61)  # past the grace
    h.run(r)
    assert h.node.suspended == [101, 102]
    # 101's copy: the turn free, and 102 not yet decided; then 102's own copy.
    assert seen == [(0, False, State.NOTIFIED), (1, False, State.SUSPENDING)]
