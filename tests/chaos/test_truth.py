"""The ground truth: a process's phases as it reported them, since when it idled, a reused
PID told apart by its start, and a DataLoader worker judged by its job."""

from __future__ import annotations

from actuator.chaos.truth import Truth

T0 = 5000.0


def test_idle_since_is_the_start_of_the_unbroken_idle_or_hung_run() -> None:
    truth = Truth()
    for at, phase in [
        (0, "busy"),
        (1, "busy"),
        (5, "idle"),
        (9, "hang"),
        (12, "busy"),
        (20, "idle"),
    ]:
        truth.observe(T0 + at, 10, 1, 0, {"phase": phase})
    (line,) = truth.timelines.values()
    assert [p for _, p in line.samples] == ["busy", "idle", "hang", "busy", "idle"]  # changes
    assert line.idle_since(T0 + 11) == T0 + 5  # idle then hung: one run
    assert line.idle_since(T0 + 13) is None and line.idle_since(T0 + 25) == T0 + 20
    assert line.phase_at(T0 + 10) == "hang" and line.phase_at(T0 - 1) is None
    assert line.last_seen == T0 + 20


def test_a_reused_pid_is_the_process_that_had_it_then_and_a_worker_answers_to_its_job() -> None:
    truth = Truth()
    truth.observe(T0, 10, 1, 0, {"phase": "idle"})
    truth.observe(T0 + 1, 11, 2, 0, {"phase": "worker", "parent": 10})
    truth.observe(T0 + 50, 10, 9, 1, {"phase": "busy"})  # PID 10 again, a new process
    assert truth.by_pid(10, T0 + 20).ticks == 1  # type: ignore[union-attr]
    assert truth.by_pid(10, T0 + 60).ticks == 9  # type: ignore[union-attr]
    worker = truth.by_pid(11, T0 + 20)
    assert worker is not None and truth.owner(worker, T0 + 20).ticks == 1
    assert truth.by_pid(12, T0) is None
