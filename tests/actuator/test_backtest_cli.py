"""The candidate thresholds and holds `backtest` is given (actuator/tools/backtest_cli.py), as an
SRE types them: SERIES=NUMBER and [RULE=]DURATION in Prometheus's grammar; anything else
refused with what is wrong. (The backtest over a real Prometheus: test_backtest.py.)"""

from __future__ import annotations

import argparse

import pytest

from actuator.tools.backtest_cli import hold, threshold


def test_a_threshold_is_a_series_and_a_number() -> None:
    assert threshold("gpu_reclaimer:idle_util_max=0.05") == ("gpu_reclaimer:idle_util_max", 0.05)
    assert threshold(" x=1e-2 ") == ("x", 0.01)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0.05", "not SERIES=NUMBER"),
        ("x=", "not SERIES=NUMBER"),
        ("1x=2", "not SERIES=NUMBER"),
        ("x=five", "not a number: 'five'"),
    ],
)
def test_a_threshold_that_is_not_one_is_refused(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        threshold(text)


def test_a_hold_is_a_duration_for_one_rule_or_all() -> None:
    assert hold("30m") == (None, 1800.0)
    assert hold("GpuProcessIdle=1h30m") == ("GpuProcessIdle", 5400.0)
    assert hold("GpuProcessIdle=1w") == ("GpuProcessIdle", 7 * 86400.0)
    with pytest.raises(argparse.ArgumentTypeError):
        hold("GpuProcessIdle=soon")
