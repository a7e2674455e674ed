"""actuator/demo/ruleset.py: durations in rules are rescaled, nothing else is."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from actuator.demo.ruleset import (
    format_promql_duration,
    parse_promql_duration,
    render_deploy,
    render_rules,
    scale_expr,
)
from tests.support import REPO


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300), ("45s", 45), ("1h30m", 5400), ("250ms", 0.25), ("1d", 86400), ("2w", 1209600)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_promql_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "m5", "5 m", "1.5m", "-5m"])
def test_parse_duration_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_promql_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (300, "5m"),
        (4, "4s"),
        (90, "90s"),
        (7200, "2h"),
        (0.25, "250ms"),
        (0, "0s"),
        (60.0004, "1m"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_promql_duration(seconds) == text


def test_scale_expr_rewrites_ranges_subqueries_and_offsets() -> None:
    expr = (
        'max_over_time(x{job="a"}[1m]) > avg_over_time(y[10m:1m] offset 5m)'
        " and rate(z[2m]) > 0 and w[5m:]"
    )
    assert scale_expr(expr, 0.1, 2.0) == (
        'max_over_time(x{job="a"}[6s]) > avg_over_time(y[1m:6s] offset 30s)'
        " and rate(z[12s]) > 0 and w[30s:]"
    )


def test_scale_expr_keeps_the_floor_for_windows_not_offsets() -> None:
    assert scale_expr("rate(x[1m] offset 1m)", 0.01, 2.0) == "rate(x[2s] offset 600ms)"


def test_scale_expr_leaves_strings_comments_and_numbers_alone() -> None:
    expr = (
        'x{le="[5m]", re=~"a[1m]"} > 300 # TUNE: 5m, not [5m]\n'
        "and on (pid) count_over_time(y[1m]) >= 3"
    )
    assert scale_expr(expr, 0.5, 1.0) == (
        'x{le="[5m]", re=~"a[1m]"} > 300 # TUNE: 5m, not [5m]\n'
        "and on (pid) count_over_time(y[30s]) >= 3"
    )


def test_render_rules_scales_for_and_floors_windows(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.rules.yml").write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "interval": "30s",
                        "rules": [
                            {"record": "r", "expr": "max_over_time(x[1m])"},
                            {"alert": "A", "expr": "r > 0", "for": "5m", "labels": {"a": "b"}},
                            {"alert": "B", "expr": "r > 0", "for": "0s"},
                            {"alert": "C", "expr": "r > 0", "for": "10s"},
                        ],
                    }
                ]
            }
        )
    )
    (source / "ignored.yml").write_text("not: rules\n")
    written = render_rules(source, tmp_path / "out", 1 / 15, eval_interval_s=1.0)
    assert [p.name for p in written] == ["a.rules.yml"]
    group = yaml.safe_load(written[0].read_text())["groups"][0]
    assert group["interval"] == "2s"
    rules = group["rules"]
    assert rules[0]["expr"] == "max_over_time(x[4s])"
    assert rules[1]["for"] == "20s"
    assert rules[1]["labels"] == {"a": "b"}
    assert rules[2]["for"] == "0s"  # "fire at once" stays at once
    assert rules[3]["for"] == "2s"  # floored at 2 evaluation intervals


def test_render_rules_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        render_rules(tmp_path, tmp_path / "out", 0.5)
    (tmp_path / "x.rules.yml").write_text("just: text\n")
    with pytest.raises(ValueError, match=r"x\.rules\.yml"):
        render_rules(tmp_path, tmp_path / "out", 0.5)
    with pytest.raises(ValueError):
        render_rules(tmp_path, tmp_path / "out", 0)


def test_render_rules_on_the_shipped_rules_changes_only_durations(tmp_path: Path) -> None:
    source = yaml.safe_load((REPO / "alert-rules" / "gpu-reclaimer.rules.yml").read_text())
    (rendered_path,) = [
        p
        for p in render_rules(REPO / "alert-rules", tmp_path, 1 / 15)
        if p.name == "gpu-reclaimer.rules.yml"
    ]
    rendered = yaml.safe_load(rendered_path.read_text())
    for group, new_group in zip(source["groups"], rendered["groups"], strict=True):
        for rule, new_rule in zip(group["rules"], new_group["rules"], strict=True):
            assert "[1m]" not in new_rule["expr"]
            # Undo the scaling textually: everything but the durations must be identical.
            assert new_rule["expr"].replace("[4s]", "[1m]") == rule["expr"]
            assert new_rule.get("labels") == rule.get("labels")
            assert new_rule.get("annotations") == rule.get("annotations")
            if "for" in rule:
                assert parse_promql_duration(new_rule["for"]) == pytest.approx(
                    parse_promql_duration(rule["for"]) / 15
                )


def test_render_deploy_substitutes_only_targets_intervals_and_urls(tmp_path: Path) -> None:
    token = tmp_path / "token"
    prom_path = render_deploy(
        REPO,
        tmp_path,
        scale=1 / 15,
        exporters=["127.0.0.1:19838"],
        actuator="127.0.0.1:19836",
        alertmanagers=["127.0.0.1:19093"],
        token_file=token,
    )
    prom = yaml.safe_load(prom_path.read_text())
    assert prom["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert prom["rule_files"] == ["../alert-rules/*.rules.yml"]
    assert (tmp_path / "alert-rules" / "gpu-reclaimer.rules.yml").is_file()
    targets = yaml.safe_load((tmp_path / "deploy" / "targets" / "gpu-exporter.yml").read_text())
    assert targets == [{"targets": ["127.0.0.1:19838"]}]
    am = (tmp_path / "deploy" / "alertmanager.yml").read_text()
    assert "http://127.0.0.1:19836/api/v1/alerts" in am
    assert f"credentials_file: {token}" in am
    assert "actuator:9836" not in am


def test_the_demo_serves_its_runbook_and_its_rules_link_there(tmp_path: Path) -> None:
    """Every rule's runbook_url, rendered for a run, opens the section of the page the demo
    serves (docs/runbook.md as HTML, each section's id its alert's anchor)."""
    import re

    import requests

    from actuator.demo.sink import Sink
    from actuator.runbook import runbook_html

    sink = Sink(pages={"/runbook": runbook_html(REPO / "docs" / "runbook.md")}).start()
    try:
        base = f"{sink.url}/runbook"
        written = render_rules(REPO / "alert-rules", tmp_path, 1 / 15, runbook_base=base)
        page = requests.get(base, timeout=5)
        assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
        assert requests.get(f"{sink.url}/elsewhere", timeout=5).status_code == 404
    finally:
        sink.stop()
    ids = set(re.findall(r'id="([^"]+)"', page.text))
    links = [
        rule["annotations"]["runbook_url"]
        for path in written
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "annotations" in rule
    ]
    assert links and all(link.startswith(base + "#") for link in links)
    assert {link.partition("#")[2] for link in links} <= ids
