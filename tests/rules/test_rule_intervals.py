"""Each rule group is evaluated no less often than its windows need: consecutive windows
overlap by at least one scrape, so every change between two samples (a log write, a
transfer, a CPU tick) falls inside some evaluation's window, and the promtool file that
times the alerts at the shipped interval runs at that interval."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from actuator.promql_duration import parse_promql_duration

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "alert-rules" / "gpu-reclaimer.rules.yml"
_RANGE = re.compile(r"\[(\d+(?:ms|s|m|h|d|w|y))(?::[^\]]*)?\]")


def _scrape_interval() -> float:
    config = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    return parse_promql_duration(config["global"]["scrape_interval"])


def _group_intervals(path: Path) -> dict[str, tuple[float, float | None]]:
    """Each group's interval (the global 15 s where it sets none) and its narrowest window."""
    config = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    default = parse_promql_duration(config["global"]["evaluation_interval"])
    found = {}
    for group in yaml.safe_load(path.read_text())["groups"]:
        interval = parse_promql_duration(group.get("interval", "0s")) or default
        windows = [
            parse_promql_duration(w)
            for rule in group["rules"]
            for w in _RANGE.findall(rule["expr"])
        ]
        found[group["name"]] = (interval, min(windows) if windows else None)
    return found


def test_every_window_overlaps_the_last_evaluations_by_a_scrape() -> None:
    scrape = _scrape_interval()
    for path in (RULES, REPO / "alert-rules" / "actuator.rules.yml"):
        for name, (interval, window) in _group_intervals(path).items():
            if window is not None:
                assert interval <= window - scrape, (
                    f"{path.name} group {name}: evaluated every {interval:g} s but its narrowest "
                    f"window is {window:g} s; a change between two {scrape:g} s scrapes could "
                    "fall between two windows"
                )


def test_the_reclaim_group_is_evaluated_less_often_than_it_is_scraped() -> None:
    """The point of the interval: the windows are judged once each, not four times over."""
    interval, window = _group_intervals(RULES)["gpu-reclaimer"]
    assert interval > _scrape_interval()
    assert window is not None and interval == window - _scrape_interval()


def test_the_promtool_timing_file_runs_at_the_shipped_interval() -> None:
    timing = yaml.safe_load((REPO / "alert-rules" / "tests" / "interval.test.yml").read_text())
    interval, _ = _group_intervals(RULES)["gpu-reclaimer"]
    assert parse_promql_duration(timing["evaluation_interval"]) == interval
