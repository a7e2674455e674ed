"""Prometheus durations, read and written back the way Prometheus writes them."""

from __future__ import annotations

import pytest

from actuator.promql_duration import format_promql_duration, parse_promql_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25), ("1d", 86400.0), (" 2w ", 1_209_600.0)],
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_promql_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "5 m", "1.5m", "-5m", "5M", "m5"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        parse_promql_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (300, "5m"),
        (3600, "1h"),
        (90, "90s"),
        (20.0, "20s"),
        (0.25, "250ms"),
        (1.0004, "1s"),
        (5400, "90m"),
    ],
)
def test_written_in_the_largest_unit_that_divides_it(seconds: float, text: str) -> None:
    assert format_promql_duration(seconds) == text
    assert parse_promql_duration(text) == pytest.approx(round(seconds, 3))


def test_a_negative_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_promql_duration(-1)
