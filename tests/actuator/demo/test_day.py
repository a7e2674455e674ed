"""The simulated day's pure parts (actuator/demo/day.py): the seeded plan, each job's phase
program at a time scale, the GPUs a `wait` printed, and the verdict on `demand` against
`idle`. (The day on the real stack: tests/e2e/test_simulated_day.py.)"""

from __future__ import annotations

import pytest

from actuator.demo.day import (
    KINDS,
    DayFigures,
    Job,
    demand_verdict,
    given_gpus,
    plan_day,
    table,
)
from tests.support import gpu_reclaimer


def test_the_same_seed_plans_the_same_day() -> None:
    assert plan_day(7) == plan_day(7)
    assert plan_day(7) != plan_day(8)
    day = plan_day(7, gpus=4)
    assert [j.arrival_h for j in day] == sorted(j.arrival_h for j in day)
    assert {j.kind for j in day} <= set(KINDS)
    assert all(j.gpus == 2 for j in day if j.kind == "hung")
    assert [j.id for j in day] == list(range(len(day)))  # numbered in arrival order
    assert len(plan_day(7, hours=12, gpus=2, jobs_per_gpu=6)) == 6


@pytest.mark.parametrize("load", ["0", "-2", "nan", "inf", "many"])
def test_a_day_s_load_that_is_no_positive_number_is_refused_in_one_line(load: str) -> None:
    done = gpu_reclaimer("demo", "--day", "--jobs-per-gpu", load)
    assert done.returncode == 2
    assert "argument --jobs-per-gpu:" in done.stderr and "Traceback" not in done.stderr


def test_a_job_s_phases_at_a_time_scale() -> None:
    scale = 1 / 240  # 1 simulated hour = 15 s
    training = Job(0, "training", 0.0, 1, busy_h=2.0, memory_gib=24)
    assert training.finishes and training.phases(scale) == "load=0.50s,busy=30.00s,done"
    notebook = Job(1, "notebook", 0.0, 1, busy_h=0.01, memory_gib=8)
    assert not notebook.finishes and notebook.phases(scale) == "busy=0.50s,idle"  # at least
    hung = Job(2, "hung", 0.0, 2, busy_h=1.0, memory_gib=40)
    assert hung.phases(scale) == "busy=15.00s,hang"


def test_the_gpus_a_wait_printed() -> None:
    assert given_gpus("GPU 2 is yours\nCUDA_VISIBLE_DEVICES=2,0\n") == (2, 0)
    assert given_gpus("CUDA_VISIBLE_DEVICES=1") == (1,)
    assert given_gpus("gpu-reclaimer: error: the actuator closed the connection\n") == ()
    assert given_gpus("") == ()


def _figures(mode: str, wait_h: float, reclaimed: int, needless: int = 0) -> DayFigures:
    return DayFigures(
        mode=mode,
        hours=24.0,
        gpus=4,
        utilisation=0.5,
        completed=10,
        started=20,
        waiting_at_end=0,
        mean_wait_h=wait_h,
        mean_wait_all_h=wait_h,
        idle_gpu_hours=1.0,
        reclaimed=reclaimed,
        harmed=0,
        needless=needless,
    )


def test_the_verdict_weighs_demand_against_idle() -> None:
    runs = {
        "observe": _figures("observe", 4.0, 0),
        "enforce": _figures("enforce", 1.0, 24),
        "demand": _figures("demand", 1.3, 8),
    }
    verdict = demand_verdict(runs)
    assert verdict.startswith("reclaim_when: demand kept 90% of idle's reduction")
    assert "with 8 of its 24 reclaims (33%; target <= 33 %) and 0 needless" in verdict
    assert demand_verdict({"observe": runs["observe"], "demand": runs["demand"]}) == ""
    text = table(list(runs.values()), seed=1, scale=1 / 120, jobs_per_gpu=5)
    assert text.startswith("Simulated day: 24 h on 4 GPUs, 5 jobs per GPU per day, seed 1,")
    assert "| jobs completed per GPU per day | 2.5 | 2.5 | 2.5 |" in text
    assert verdict in text and text.rstrip().endswith("not a promise for a real fleet.")
