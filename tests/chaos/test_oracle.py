"""The chaos oracle's judgement on hand-made truths and audit records: each violation class
found, and nothing found where everything was right."""

from __future__ import annotations

from actuator.chaos.oracle import Acknowledged, Spawned, Told, Usage, judge, leaks, unrecorded
from actuator.chaos.truth import Truth

T0 = 1_000_000.0


def _truth(*lines: tuple[int, int, list[tuple[float, str]]], parent: int | None = None) -> Truth:
    truth = Truth()
    for pid, ticks, samples in lines:
        for at, phase in samples:
            extra: dict[str, object] = {"phase": phase}
            if parent is not None and phase == "worker":
                extra["parent"] = parent
            truth.observe(T0 + at, pid, ticks, 0, extra)
    return truth


def _signal(case: int, at: float, pid: int, signal: str = "SIGTERM") -> dict[str, object]:
    return {
        "event": "signals",
        "case": case,
        "ts": T0 + at,
        "signal": signal,
        "results": [{"pid": pid, "signal": signal, "sent": True}],
    }


def _notice(case: int, at: float, delivered: bool = True) -> dict[str, object]:
    return {"event": "notice", "case": case, "ts": T0 + at, "delivered": delivered}


def _judge(records, truth, spawned, end: float = 200.0, told=()):  # type: ignore[no-untyped-def]
    return judge(records, truth, spawned, window=20.0, miss_after=60.0, end=T0 + end, told=told)


ABANDONED = Spawned("abandoned-1", "abandoned", 100, T0)


def test_a_signal_after_the_window_of_ground_truth_idleness_is_right() -> None:
    truth = _truth((100, 1, [(0, "busy"), (5, "idle"), (60, "idle")]))
    verdict = _judge([_notice(1, 30), _signal(1, 50, 100)], truth, [ABANDONED])
    assert verdict.violations == [] and verdict.signals == 1
    (reclaim,) = verdict.reclaims
    assert reclaim.latency == 45.0 and verdict.missed == []


def test_each_wrong_signal_is_a_violation_of_its_class() -> None:
    truth = _truth(
        (100, 1, [(0, "busy"), (5, "idle"), (30, "busy")]),  # resumed before the signal
        (200, 2, [(0, "idle")]),  # protected
        (300, 3, [(0, "busy"), (40, "idle")]),  # idle 10 s only
    )
    spawned = [
        ABANDONED,
        Spawned("protected-2", "protected", 200, T0),
        Spawned("resumes-3", "resumes", 300, T0),
    ]
    records = [
        _notice(1, 20),
        _signal(1, 40, 100),
        _signal(2, 60, 200),  # no notice for case 2 either
        _notice(3, 45),
        _signal(3, 50, 300),
        _signal(3, 51, 300),  # the same step twice
        _signal(4, 70, 999),  # a process the run never started
    ]
    kinds = sorted(v.kind for v in _judge(records, truth, spawned).violations)
    assert kinds == sorted(
        [
            "not_idle",
            "no_notice",
            "protected",
            "not_idle",
            "step_twice",
            "not_idle",
            "unknown_process",
        ]
    )


def test_a_dataloader_worker_is_judged_by_its_job_and_a_reused_pid_by_its_own_process() -> None:
    truth = _truth((100, 1, [(0, "busy"), (5, "idle")]))
    truth.observe(T0 + 1, 101, 9, 0, {"phase": "worker", "parent": 100})
    records = [_notice(1, 20), _signal(1, 40, 100), _signal(1, 40, 101)]
    assert _judge(records, truth, [ABANDONED]).violations == []
    # PID 100 reused at 100 s by a busy process: a signal then is judged by the new one.
    truth.observe(T0 + 100, 100, 77, 0, {"phase": "busy"})
    reused = Spawned("busy-9", "busy", 100, T0 + 99.5)
    verdict = _judge([_notice(2, 101), _signal(2, 120, 100)], truth, [ABANDONED, reused])
    assert [v.kind for v in verdict.violations] == ["not_idle"]


def test_a_reclaimed_case_whose_process_still_holds_the_gpu_is_not_freed() -> None:
    truth = _truth((100, 1, [(0, "idle"), (90, "idle")]))
    reclaimed = {
        "event": "decision",
        "case": 1,
        "to": "reclaimed",
        "ts": T0 + 50,
        "pid": 100,
        "start_ticks": 1,
    }
    verdict = _judge([_notice(1, 20), _signal(1, 30, 100), reclaimed], truth, [ABANDONED])
    assert [v.kind for v in verdict.violations] == ["not_freed"]


def test_idle_long_enough_and_never_reclaimed_is_missed_with_why() -> None:
    truth = _truth((100, 1, [(0, "busy"), (10, "idle"), (150, "idle")]))
    decision = {
        "event": "decision",
        "case": 7,
        "to": "deferred",
        "pid": 100,
        "ts": T0 + 40,
        "reason": "NVML down",
    }
    verdict = _judge([decision], truth, [ABANDONED], end=150.0)
    (missed,) = verdict.missed
    assert missed.label == "abandoned-1" and "NVML down" in missed.why and not verdict.violations


def test_growth_past_the_tolerance_is_a_leak_and_a_flat_component_is_not() -> None:
    flat = [Usage(T0 + i * 2, 40, 10, 100 * 2**20) for i in range(30)]
    growing = [Usage(T0 + i * 2, 40 + 2 * i, 10, 100 * 2**20) for i in range(30)]
    found = leaks({"actuator": flat, "exporter": growing})
    assert [v.detail.split(":")[0] for v in found] == ["exporter"]


def test_a_notice_must_reach_the_processs_owner_and_name_its_pid() -> None:
    truth = _truth((100, 1, [(0, "busy"), (5, "idle")]))
    alices = Spawned("abandoned-1", "abandoned", 100, T0, owner="day-alice")
    opened = {
        "event": "decision",
        "case": 1,
        "to": "pending",
        "ts": T0 + 25,
        "pid": 100,
        "start_ticks": 1,
    }
    right = Told(T0 + 30, 1, "day-alice", 100)
    assert _judge([opened], truth, [alices], told=[right]).violations == []
    wrong = [
        Told(T0 + 30, 1, "day-bob", 100),
        Told(T0 + 31, 1, "day-alice", 4242),
        Told(T0 + 32, 9, "day-alice", 100),
    ]
    kinds = [v.kind for v in _judge([opened], truth, [alices], told=wrong).violations]
    assert kinds == ["wrong_person", "false_fact", "wrong_person"]


def test_every_acknowledged_firing_alert_reaches_a_recorded_decision() -> None:
    def ep(name: str, at: float, **kw: object) -> Acknowledged:
        base: dict[str, object] = {
            "status": "firing",
            "ends_ts": None,
            "processed": True,
            "case_id": 1,
        }
        return Acknowledged(name, T0 + at, **(base | kw))  # type: ignore[arg-type]

    decided = [{"event": "decision", "case": 1, "ts": T0 + 1}]
    fine = [
        ep("decided", 0),
        ep("resolved", 0, status="resolved", case_id=None),
        ep("stale", 0, ends_ts=T0 - 5, case_id=None),
        ep("too-recent", 190, processed=False, case_id=None),
    ]
    assert unrecorded(fine, decided, end=T0 + 200) == []
    lost = [ep("unprocessed", 0, processed=False, case_id=None), ep("no-decision", 0, case_id=2)]
    found = unrecorded(lost, decided, end=T0 + 200)
    assert [v.kind for v in found] == ["lost_decision", "lost_decision"]
    assert "unprocessed" in found[0].detail and found[1].case == 2


def test_a_signal_to_a_process_of_another_node_than_its_case_names_is_wrong_node() -> None:
    """Two simulated nodes share one machine's PIDs: a case for node B that signals a PID
    whose GPU is on node A signalled the wrong process, however idle it was."""
    truth = Truth()
    for at, phase in ((0, "busy"), (5, "idle"), (60, "idle")):
        truth.observe(T0 + at, 100, 1, 0, {"phase": phase}, node="node-a")
    created = {"event": "decision", "case": 1, "ts": T0 + 25, "node": "node-b", "pid": 100}
    records = [created, _notice(1, 30), _signal(1, 50, 100)]
    kinds = [v.kind for v in _judge(records, truth, [ABANDONED]).violations]
    assert kinds == ["wrong_node"]
    right = {**created, "node": "node-a"}
    assert _judge([right, _notice(1, 30), _signal(1, 50, 100)], truth, [ABANDONED]).violations == []
