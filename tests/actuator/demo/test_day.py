"""The simulated day's pure parts (actuator/demo/day.py): the seeded plan, each job's phase
program at a time scale, the GPUs a `wait` printed, and the verdict on `demand` against
`idle`. (The day on the real stack: tests/e2e/test_simulated_day.py.)"""

from __future__ import annotations

import pytest

from actuator.demo.day import (
    KINDS,
    DayFigures,
    Job,
    day_mix,
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
    assert all(j.pause_h > 0 for j in day if j.kind == "paused")
    assert all(j.pause_h == 0 for j in day if j.kind != "paused")
    abandoned = [j for j in day if not j.finishes]
    assert abandoned and all(0.5 <= (j.noticed_h or 0) <= 4.0 for j in abandoned)
    assert all(j.noticed_h is None for j in day if j.finishes)
    never = plan_day(7, gpus=4, noticed_within_h=None)
    assert all(j.noticed_h is None for j in never)


@pytest.mark.parametrize("count", [1, 3, 16, 20, 32, 97])
def test_a_day_has_the_stated_mix_of_kinds_whatever_its_seed(count: int) -> None:
    mix = day_mix(count)
    assert len(mix) == count
    for kind, share in KINDS.items():  # each kind within one job of its share
        assert abs(mix.count(kind) - share * count) < 1, (kind, mix)
    days = [plan_day(seed, jobs_per_gpu=count / 4) for seed in (1, 2, 3)]
    assert all(sorted(j.kind for j in day) == sorted(mix) for day in days)
    if count >= 16:  # the order is the seed's
        assert len({tuple(j.kind for j in day) for day in days}) == 3


def test_the_help_states_the_day_s_own_defaults() -> None:
    from actuator.demo.day import JOBS_PER_GPU, NOTICED_WITHIN_H

    done = gpu_reclaimer("demo", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert f"(default {JOBS_PER_GPU:g}:" in text  # --jobs-per-gpu
    assert f"this long after it stopped working (default {NOTICED_WITHIN_H:g})" in text


@pytest.mark.parametrize("hours", ["0", "0.2", "-1", "nan", "soon"])
def test_a_time_for_owners_to_notice_that_is_no_time_is_refused_in_one_line(hours: str) -> None:
    done = gpu_reclaimer("demo", "--day", "--noticed-within", hours)
    assert done.returncode == 2
    assert "argument --noticed-within:" in done.stderr and "Traceback" not in done.stderr


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
    noticed = Job(4, "hung", 0.0, 2, busy_h=1.0, memory_gib=40, noticed_h=2.0)
    assert noticed.phases(scale) == "busy=15.00s,hang=30.00s,done"
    crashed = Job(5, "crashed", 0.0, 1, busy_h=1.0, memory_gib=8, noticed_h=0.5)
    assert crashed.phases(scale) == "busy=15.00s,idle=7.50s,done"
    paused = Job(3, "paused", 0.0, 1, busy_h=1.0, memory_gib=8, pause_h=1.5)
    assert paused.finishes and paused.resumes and not training.resumes
    assert paused.phases(scale) == "load=0.50s,busy=7.50s,idle=22.50s,busy=7.50s,done"


def test_the_gpus_a_wait_printed() -> None:
    assert given_gpus("GPU 2 is yours\nCUDA_VISIBLE_DEVICES=2,0\n") == (2, 0)
    assert given_gpus("CUDA_VISIBLE_DEVICES=1") == (1,)
    assert given_gpus("gpu-reclaimer: error: the actuator closed the connection\n") == ()
    assert given_gpus("") == ()


def _figures(
    mode: str, wait_h: float, reclaimed: int, needless: int = 0, lost: int = 0, jobs: int = 0
) -> DayFigures:
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
        lost=lost,
        needless=needless,
        jobs_reclaimed=jobs,
    )


def test_the_verdict_weighs_demand_against_idle() -> None:
    runs = {
        "observe": _figures("observe", 4.0, 0),
        "enforce": _figures("enforce", 1.0, 24, lost=1, jobs=12),
        "demand": _figures("demand", 1.3, 8, jobs=5),
    }
    verdict = demand_verdict(runs)
    assert verdict.startswith("reclaim_when: demand kept 90% of idle's reduction")
    assert (
        "with 8 of its 24 reclaims (33%; target <= 33 %; of its jobs reclaimed: 5 of 12, 42%) "
        "and 0 needless" in verdict
    )
    assert demand_verdict({"observe": runs["observe"], "demand": runs["demand"]}) == ""
    text = table(list(runs.values()), seed=1, scale=1 / 120, jobs_per_gpu=5)
    assert text.startswith("Simulated day: 24 h on 4 GPUs, 5 jobs per GPU per day, seed 1,")
    assert "owners end an abandoned job within 4 h\n" in text
    never = table(list(runs.values()), seed=1, scale=1 / 120, noticed_within_h=None)
    assert "abandoned jobs never noticed by their owners\n" in never
    assert "| jobs completed per GPU per day | 2.5 | 2.5 | 2.5 |" in text
    assert (
        "| paused sessions reclaimed while their owner was away (work lost) | 0 | 1 | 0 |" in text
    )
    assert verdict in text and text.rstrip().endswith("not a promise for a real fleet.")


def test_a_paused_sessions_owner_is_back_when_its_pause_ends_and_the_table_counts_the_work() -> (
    None
):
    scale = 1 / 120
    job = Job(0, "paused", arrival_h=1.0, gpus=1, busy_h=2.0, memory_gib=16, pause_h=1.5)
    load = job.load_h(scale)
    assert job.back_h(scale) == pytest.approx(load + 1.0 + 1.5)  # the first half, the pause
    assert job.ends_h(scale) == pytest.approx(load + 2.0 + 1.5)
    assert Job(1, "redo", 0.0, 1, 1.0, 8).finishes  # a redo works until it finishes
    figures = DayFigures(
        mode="suspend",
        hours=24.0,
        gpus=4,
        utilisation=0.5,
        completed=12,
        started=20,
        waiting_at_end=0,
        mean_wait_h=0.5,
        mean_wait_all_h=0.5,
        idle_gpu_hours=3.0,
        reclaimed=4,
        harmed=0,
        work_lost_gpu_h=1.3,
        suspended=3,
        resumed=2,
        ceiling=16,
        peak_host_gib=40.0,
    )
    report = table([figures], seed=1, scale=scale)
    assert "| enforce, idle, suspend rung |" in report
    assert "| completion ceiling (every job started on arrival), per GPU per day | 4.0 |" in report
    assert "| work lost (GPU-hours done, then killed) | 1.3 h |" in report
    assert "| processes suspended (checkpointed into host memory) | 3 |" in report
    assert "| host memory held by checkpoints (peak) | 40.0 GiB |" in report
    assert demand_verdict({"suspend": figures}) == ""  # demand is judged against idle alone


def test_notebook_tabs_are_drawn_apart_from_the_jobs_and_only_for_sessions() -> None:
    """Issue 59: most paused sessions' owners leave their tab connected, some abandoned
    notebooks' tabs were never closed; the same seed plans the same jobs with the tabs."""
    from dataclasses import replace

    from actuator.demo.day import TAB_OPEN_SHARE

    days = [plan_day(seed, gpus=4) for seed in range(1, 201)]
    jobs = [j for day in days for j in day]
    assert all(not j.tab_open for j in jobs if j.kind not in TAB_OPEN_SHARE)
    for kind, share in TAB_OPEN_SHARE.items():
        of_kind = [j for j in jobs if j.kind == kind]
        seen = sum(j.tab_open for j in of_kind) / len(of_kind)
        assert abs(seen - share) < 0.05, (kind, seen)  # 600 paused, 1000 notebooks
    plain = [replace(j, tab_open=False) for j in plan_day(1, gpus=4)]
    assert plain == [replace(j, tab_open=False) for j in days[0]]  # the same jobs


def test_each_mode_s_policy_at_the_day_s_scale() -> None:
    from actuator.demo.day import MODES, PRESENCE_GRACE_H, mode_policy
    from actuator.policy import Policy

    scale = 1 / 120
    base = {"defaults": {"grace": "5s"}}
    for mode in MODES:  # each one a valid policy, the base kept
        policy = mode_policy(base, mode, scale)
        assert policy["defaults"]["grace"] == "5s"
        Policy.model_validate({k: v for k, v in policy.items() if k != "demand"})
    assert mode_policy(base, "observe", scale)["mode"] == "observe"
    presence = mode_policy(base, "presence", scale)["defaults"]
    assert presence["presence_grace"] == f"{PRESENCE_GRACE_H * 30:g}s" and "suspend" not in presence
    both = mode_policy(base, "suspend-presence", scale)["defaults"]
    assert both["suspend"] is True and both["presence_grace"] == presence["presence_grace"]
    assert "presence_grace" not in mode_policy(base, "suspend", scale)["defaults"]
    assert base == {"defaults": {"grace": "5s"}}  # not changed in place
