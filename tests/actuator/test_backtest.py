"""`gpu-reclaimer backtest` against a real Prometheus holding known raw exporter series
(backfilled with `promtool tsdb create-blocks-from openmetrics`): the shipped rules and
candidates evaluated by Prometheus, with exact flagged minutes."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actuator.tools.backtest import BacktestError, RuleSet
from actuator.tools.backtest_cli import SHIPPED_RULES
from tests.helpers.history import M, backfilled_history
from tests.helpers.prom import Server
from tests.support import gpu_reclaimer_command


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, int]]:
    with backfilled_history(tmp_path_factory.mktemp("backtest")) as (prom, start):
        yield prom, start


def backtest(prom: Server, start: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *gpu_reclaimer_command(),
            "backtest",
            "--prometheus",
            prom.url,
            "--since",
            _iso(start),
            "--until",
            _iso(start + 120 * M),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(ts))


def _processes(done: subprocess.CompletedProcess[str], alert: str) -> dict[str, dict]:
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    return {r["pid"]: r for r in got["processes"] if r["alert"] == alert}


def test_a_lower_bar_for_utilisation_flags_the_15_percent_process(
    backfilled: tuple[Server, int],
) -> None:
    prom, start = backfilled
    done = backtest(
        prom,
        start,
        "--threshold",
        "gpu_process:sm_utilization_ratio:max_window=0.2",
        "--format",
        "json",
    )
    assert "querying" in done.stderr  # progress
    rows = _processes(done, "GpuProcessIdle")
    # Idle at every step from minute 11 (the first 1m window of zeros) to minute 70; with
    # for: 5m it fires from minute 16: 55 steps of 60 s.
    assert rows["100"]["change"] == "both"
    assert rows["100"]["candidate_minutes"] == rows["100"]["baseline_minutes"] == 55
    assert rows["100"]["max_memory_gib"] == 4
    assert rows["100"]["candidate_gib_hours"] == pytest.approx(4 * 55 / 60, abs=1e-3)
    assert rows["200"]["change"] == "new" and rows["200"]["candidate_minutes"] == 55
    assert rows["200"]["baseline_minutes"] == 0 and rows["200"]["user"] == "bob"
    assert rows["400"]["change"] == "both" and rows["400"]["candidate_minutes"] == 15
    assert "300" not in rows
    (summary,) = [a for a in json.loads(done.stdout)["alerts"] if a["alert"] == "GpuProcessIdle"]
    assert summary["newly_flagged"] == 1 and summary["no_longer_flagged"] == 0
    assert summary["candidate"]["processes"] == 3 and summary["baseline"]["processes"] == 2
    assert summary["candidate"]["minutes"] == 125 and summary["baseline"]["minutes"] == 70


def test_a_longer_hold_time_stops_flagging_the_short_idle_spell(
    backfilled: tuple[Server, int],
) -> None:
    prom, start = backfilled
    done = backtest(prom, start, "--for", "GpuProcessIdle=30m", "--format", "json")
    rows = _processes(done, "GpuProcessIdle")
    assert rows["100"]["candidate_minutes"] == 30 and rows["100"]["baseline_minutes"] == 55
    assert rows["400"]["change"] == "no longer" and rows["400"]["candidate_minutes"] == 0
    assert rows["400"]["baseline_minutes"] == 15
    assert "200" not in rows


def test_the_table_names_the_changes(backfilled: tuple[Server, int]) -> None:
    prom, start = backfilled
    done = backtest(prom, start, "--for", "30m", "--alert", "GpuProcessIdle")
    assert done.returncode == 0, done.stderr
    assert "GpuProcessIdle" in done.stdout and "GpuProcessStalled" not in done.stdout
    assert "candidate (for 30m): 1 processes, 30 min flagged" in done.stdout
    assert "baseline  (for 5m): 2 processes, 70 min flagged" in done.stdout
    assert "newly flagged: 0, no longer flagged: 1" in done.stdout
    (row,) = [line.split() for line in done.stdout.splitlines() if " dave " in f" {line} "]
    assert row[:6] == ["GpuProcessIdle", "no", "longer", "n1", "1", "400"], row


def test_clear_errors(backfilled: tuple[Server, int], tmp_path: Path) -> None:
    prom, start = backfilled
    for args, message in [
        (("--threshold", "nothing_like_this=1"), "compares nothing_like_this"),
        (("--threshold", "x"), "not SERIES=NUMBER"),
        (("--for", "NoSuchAlert=5m"), "no alert NoSuchAlert"),
        (("--alert", "NoSuchAlert"), "no alert NoSuchAlert"),
        (("--rules", str(tmp_path / "missing.yml")), "missing.yml: cannot read"),
    ]:
        done = backtest(prom, start, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    unreachable = subprocess.run(
        [
            *gpu_reclaimer_command(),
            "backtest",
            "--prometheus",
            "http://127.0.0.1:9",
            "--since",
            "1h",
            "--timeout",
            "2s",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 2 and "cannot reach Prometheus" in unreachable.stderr


def test_recording_rules_are_written_out_down_to_raw_series() -> None:
    rules = RuleSet.load(SHIPPED_RULES)
    expanded = rules.expanded(rules.alerts["GpuProcessIdle"].expr)
    assert not {
        name for name in rules.records if f"{name}\n" in expanded or expanded.endswith(name)
    }, "a recorded series was left in"
    assert "gpu_process_sm_utilization_ratio[1m]" in expanded
    lowered = rules.with_thresholds({"gpu_process:sm_utilization_ratio:max_window": 0.2})
    assert "<= 0.2 # TUNE: util ratio" in lowered.expanded(lowered.alerts["GpuProcessIdle"].expr)


def test_a_recorded_series_used_with_a_range_cannot_be_inlined(tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(
        "groups:\n- name: g\n  rules:\n  - record: a:b\n    expr: up\n"
        "  - alert: X\n    expr: max_over_time(a:b[5m]) > 0\n"
    )
    rules = RuleSet.load(path)
    with pytest.raises(BacktestError, match="used with a selector or range"):
        rules.expanded(rules.alerts["X"].expr)


def test_a_name_recorded_by_several_rules_is_their_union_with_each_rules_labels(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rules.yml"
    rule = "  - record: a:size\n    expr: {expr}\n    labels:\n      size: {size}\n"
    path.write_text(
        "groups:\n- name: g\n  rules:\n"
        + rule.format(expr="m < 2", size="small")
        + rule.format(expr="m >= 2", size="'large$1'")
        + "  - alert: X\n    expr: up * on (i) group_left (size) a:size\n"
    )
    expanded = RuleSet.load(path).expanded("a:size")
    assert 'label_replace(\nm < 2\n, "size", "small", "", "")' in expanded
    # A `$` in a static label is itself, not label_replace's reference to a group.
    assert 'label_replace(\nm >= 2\n, "size", "large$$1", "", "")' in expanded
    assert "\nor\n" in expanded
    # One label set recorded twice would be two rules writing the same series.
    path.write_text(
        "groups:\n- name: g\n  rules:\n"
        + rule.format(expr="m < 2", size="small")
        + rule.format(expr="m < 3", size="small")
        + "  - alert: X\n    expr: a:size\n"
    )
    with pytest.raises(BacktestError, match="recorded twice with one label set"):
        RuleSet.load(path)
