"""The thresholds (and the sample window) read from a rules file: exactly one value for each,
where the idle rule states it; anything else is an error that says what was found."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.thresholds import SHIPPED, ThresholdsError, from_rules, load
from tests.support import REPO

RULES = REPO / "alert-rules" / "gpu-reclaimer.rules.yml"


def test_the_shipped_rules_state_the_shipped_values() -> None:
    assert load(RULES) == SHIPPED


def test_a_tuned_value_and_window_are_read_back() -> None:
    text = RULES.read_text().replace("<= 0.05 # TUNE", "<= 0.2 # TUNE").replace("[1m]", "[2m]")
    tuned = from_rules(text)
    assert tuned.max_sm_util == 0.2 and tuned.sample_window == "2m"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (("<= 0.05 # TUNE", ""), "max_sm_util"),  # missing
        (("max_over_time(gpu_process_sm_utilization_ratio[1m])", "max_over_time(x[1m])"), "window"),
    ],
)
def test_a_rules_file_without_a_value_where_the_actuator_looks_is_refused(
    change: tuple[str, str], says: str
) -> None:
    with pytest.raises(ThresholdsError, match=says):
        from_rules(RULES.read_text().replace(*change))


def test_two_different_windows_are_ambiguous() -> None:
    text = RULES.read_text()
    twice = text + "\n# max_over_time(gpu_process_sm_utilization_ratio[5m])\n"
    with pytest.raises(ThresholdsError, match=r"found \['1m', '5m'\]"):
        from_rules(twice)


def test_an_unreadable_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ThresholdsError, match="cannot read rules file"):
        load(tmp_path / "missing.yml")
