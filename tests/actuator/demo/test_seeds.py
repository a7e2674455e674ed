"""The day over several seeds (actuator/demo/seeds.py): each mode's mean over the seeds
and each seed's value, and `--seed` taking a list."""

from __future__ import annotations

import pytest

from actuator.demo.day import DayFigures
from actuator.demo.seeds import mean_table
from tests.support import gpu_reclaimer


def _day(mode: str, completed: int, wait_h: float, lost_h: float, suspended: int = 0) -> DayFigures:
    return DayFigures(
        mode=mode,
        hours=24.0,
        gpus=4,
        utilisation=0.5,
        completed=completed,
        started=completed,
        waiting_at_end=0,
        mean_wait_h=wait_h,
        mean_wait_all_h=wait_h,
        idle_gpu_hours=10.0,
        reclaimed=0 if mode == "observe" else 20,
        harmed=0,
        work_lost_gpu_h=lost_h,
        suspended=suspended,
        peak_host_gib=100.0 + suspended,
        ceiling=20,
    )


def test_the_means_over_seeds_show_each_seeds_value_beside_them() -> None:
    text = mean_table(
        {
            1: [_day("observe", 18, 1.7, 0.0), _day("suspend", 19, 0.6, 0.0, suspended=16)],
            2: [_day("observe", 19, 1.1, 0.0), _day("suspend", 19, 0.1, 0.0, suspended=12)],
            3: [_day("observe", 17, 2.7, 0.0), _day("suspend", 20, 1.1, 0.0, suspended=14)],
        }
    )
    assert text.startswith("Means over seeds 1, 2, 3 (then each seed's value):")
    assert "| | observe (nothing reclaimed) | enforce, idle, suspend rung |" in text
    # 18, 19, 17 jobs on 4 GPUs in 24 h: 4.5, 4.75, 4.25 a GPU; their mean 4.5
    assert "| jobs completed per GPU per day | 4.5 (4.5, 4.8, 4.2) | 4.8 (4.8, 4.8, 5) |" in text
    assert "| mean queue wait (a job still waiting: until the end) | 1.8 h (1.7, 1.1, 2.7) |" in (
        text
    )
    # Host memory only where something was suspended: "-" observing, not a mean of zeros.
    assert "| host memory held by checkpoints (peak) | - | 114.0 GiB (116, 112, 114) |" in text


def test_a_mode_missing_from_a_seed_is_averaged_over_the_seeds_that_ran_it() -> None:
    text = mean_table({1: [_day("observe", 18, 1.0, 0.0)], 2: [_day("enforce", 19, 0.5, 1.5)]})
    assert "| work lost (GPU-hours done, then killed) | 0.0 h (0) | 1.5 h (1.5) |" in text


@pytest.mark.parametrize("seeds", ["1,x", "", "-1", "1;2"])
def test_seeds_that_are_no_whole_numbers_are_refused_in_one_line(seeds: str) -> None:
    done = gpu_reclaimer("demo", "--day", "--seed", seeds)
    assert done.returncode == 2
    assert "argument --seed:" in done.stderr and "Traceback" not in done.stderr
