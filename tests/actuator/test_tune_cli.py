"""The utilisation thresholds `tune` tries (actuator/tools/tune_cli.py): ratios from 0 to 1, as the
rules compare them; a percentage or a word is refused with what it should be. (The tuning
itself over a real Prometheus: test_tune.py.)"""

from __future__ import annotations

import argparse

import pytest

from actuator.tools.tune_cli import _ratio


@pytest.mark.parametrize(
    ("text", "value"), [("0", 0.0), ("0.05", 0.05), ("1", 1.0), ("1e-2", 0.01)]
)
def test_a_ratio_from_zero_to_one(text: str, value: float) -> None:
    assert _ratio(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [("5", "from 0 to 1, not 5"), ("-0.1", "from 0 to 1"), ("5%", "not a number"), ("", "not a")],
)
def test_anything_else_is_refused_with_what_it_should_be(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        _ratio(text)
