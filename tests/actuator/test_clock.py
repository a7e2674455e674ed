"""The actuator's wait clock: CLOCK_BOOTTIME, which never steps back, counts at the rate of
the monotonic clock, and is at least as far on (it also counts time suspended)."""

from __future__ import annotations

import time

from actuator.clock import boottime


def test_boottime_runs_with_the_monotonic_clock_and_never_steps_back() -> None:
    first_boot, first_mono = boottime(), time.monotonic()
    readings = [boottime() for _ in range(1000)]
    time.sleep(0.05)
    last_boot, last_mono = boottime(), time.monotonic()
    assert readings == sorted(readings) and readings[0] >= first_boot
    assert first_boot >= first_mono - 0.01  # suspend only ever adds to it
    assert abs((last_boot - first_boot) - (last_mono - first_mono)) < 0.01
