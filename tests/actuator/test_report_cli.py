"""The period every history command reads (actuator/tools/report_cli.py: report, backtest, tune):
a duration back from now in Prometheus's grammar or an ISO time, in order, and a mistake
named in one line. (The report itself over a real Prometheus: test_report.py.)"""

from __future__ import annotations

import argparse
from datetime import datetime

import pytest

from actuator.tools.report_cli import parse_time, period
from exporter.argtypes import CommandError

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "seconds_back"),
    [("7d", 7 * 86400), ("1w", 7 * 86400), ("90m", 5400), ("1h30m", 5400), ("1y", 365 * 86400)],
)
def test_a_duration_is_back_from_now(text: str, seconds_back: float) -> None:
    assert parse_time(text, NOW) == NOW - seconds_back


def test_an_iso_time_is_that_time() -> None:
    assert parse_time("2026-12-01T09:00:00+00:00", NOW) == 1796115600.0
    local = datetime(2026, 12, 1, 9, 0).timestamp()  # no zone: the machine's local time
    assert parse_time("2026-12-01T09:00:00", NOW) == local
    assert parse_time("2026-12-01", NOW) == datetime(2026, 12, 1).timestamp()


@pytest.mark.parametrize("text", ["yesterday", "7 days", "-1d", "2026-13-01", "", "1d2"])
def test_anything_else_is_named(text: str) -> None:
    with pytest.raises(CommandError):
        parse_time(text, NOW)


def test_the_period_runs_forward() -> None:
    start, end = period(argparse.Namespace(since="2d", until="1d"))
    assert end - start == pytest.approx(86400, abs=1)
    with pytest.raises(CommandError, match="--since must be before --until"):
        period(argparse.Namespace(since="1d", until="2d"))
    start, end = period(argparse.Namespace(since="1h", until=None))  # until now
    assert end - start == pytest.approx(3600, abs=1)
