"""Human sizes and durations (exporter/units.py): what config files and command lines say."""

from __future__ import annotations

import pytest

from exporter.units import format_duration, parse_duration, parse_size


@pytest.mark.parametrize(
    "text,seconds",
    [("90", 90.0), ("1m30s", 90.0), ("250ms", 0.25), ("7d", 604800.0), (" 2h ", 7200.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "-5", "forever", "1 h", "", "5parsecs"])
def test_a_duration_is_a_finite_number_of_seconds_or_an_error(text: str) -> None:
    """'nan' and 'inf' parse as floats: taken as durations they once reached a decision
    function (GPU_RECLAIMER_KEEP=nan) and crashed it."""
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_booleans_are_not_durations() -> None:
    with pytest.raises(ValueError, match="not a boolean"):
        parse_duration(True)


@pytest.mark.parametrize(
    "seconds,text",
    [(0, "0s"), (0.25, "250ms"), (90, "1m30s"), (5400, "1h30m"), (86400, "24h"), (172800, "48h")],
)
def test_durations_print_as_they_are_written(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


def test_sizes() -> None:
    assert parse_size("1GiB") == 1024**3 and parse_size("2G") == 2 * 1000**3
    with pytest.raises(ValueError):
        parse_size("lots")
