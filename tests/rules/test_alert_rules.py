"""The alert rules and reference configs, checked by the real promtool and amtool.

The behaviour itself is specified by the promtool unit tests in alert-rules/tests/; this file
makes `pytest` run them too, checks the label/annotation contract the actuator and chat rely
on, and proves that rules rendered by actuator/demo/ruleset.py still pass the same tests.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from actuator.demo.ruleset import format_promql_duration, parse_promql_duration, render_rules
from actuator.runbook import DEFAULT_BASE
from actuator.tools.backtest import RuleSet
from tests.helpers.prom import require_binary
from tests.support import REPO

RULES_DIR = REPO / "alert-rules"
RULE_FILES = sorted(RULES_DIR.glob("*.rules.yml"))
TEST_FILES = sorted((RULES_DIR / "tests").glob("*.test.yml"))

RECLAIMABLE = {"GpuProcessIdle", "GpuServiceIdle", "GpuProcessStalled"}
PER_SERIES_ALERTS = RECLAIMABLE | {"GpuMemoryOrphaned"}
ACTUATOR_ALERTS = {
    "GpuReclaimFailed",
    "GpuReclaimerCircuitBreakerOpen",
    "GpuReclaimerActuatorDown",
    "GpuReclaimerAuditRecordsLost",
}
ALL_ALERTS = RECLAIMABLE | ACTUATOR_ALERTS | {"GpuMemoryOrphaned", "GpuExporterDown", "GpuNvmlDown"}
# What the actuator and chat need on every per-process alert (labels, not annotations);
# start_time lets the actuator tell the flagged process from a later one with the same PID.
PROCESS_LABELS = {"node", "gpu", "uuid", "pid", "start_time", "user", "command", "project"}


def run(command: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}"
    return result


def alert_rules() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    found[rule["alert"]] = rule
    return found


def alert_labels() -> dict[str, dict[str, str]]:
    """The labels each alert carries beyond its expression's own: its recorded condition's
    and its own `labels:` (read as the backtest reads them)."""
    return {
        name: alert.labels
        for path in RULE_FILES
        for name, alert in RuleSet.load(path).alerts.items()
    }


def test_promtool_check_rules() -> None:
    promtool = require_binary("promtool")
    assert RULE_FILES, "no alert-rules/*.rules.yml"
    run([promtool, "check", "rules", *map(str, RULE_FILES)])


@pytest.mark.reliability(22, 24, 65)
def test_promtool_unit_tests() -> None:
    promtool = require_binary("promtool")
    assert TEST_FILES, "no alert-rules/tests/*.test.yml"
    result = run(
        [promtool, "test", "rules", *(str(p.relative_to(RULES_DIR)) for p in TEST_FILES)],
        cwd=RULES_DIR,
    )
    assert "FAILED" not in result.stdout + result.stderr


def test_amtool_check_config() -> None:
    amtool = require_binary("amtool")
    run([amtool, "check-config", str(REPO / "deploy" / "alertmanager.yml")])


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        # The rules' reclaim alerts reach the actuator only (chat hears its decisions).
        (
            ["alertname=GpuProcessIdle", "reclaim=true", "severity=warning"],
            "gpu-reclaimer-actuator",
        ),
        (
            ["alertname=GpuProcessStalled", "reclaim=true", "severity=warning"],
            "gpu-reclaimer-actuator",
        ),
        (
            ["alertname=GpuServiceIdle", "reclaim=true", "severity=info", "class=service"],
            "gpu-reclaimer-actuator",
        ),
        (["alertname=GpuReclaimScheduled", "severity=info", "case=7"], "chat"),
        (["alertname=GpuProcessReclaimed", "severity=info", "case=7"], "chat"),
        (["alertname=GpuHandedOff", "severity=info", "case=7"], "chat"),
        (["alertname=GpuReclaimFailed", "severity=warning", "case=7"], "chat"),
        (["alertname=GpuReclaimerCircuitBreakerOpen", "severity=critical"], "chat"),
        (["alertname=GpuExporterDown", "severity=critical", "class=health"], "chat"),
    ],
)
def test_the_reference_routes_as_alertmanager_evaluates_them(
    labels: list[str], receivers: str
) -> None:
    """`amtool config routes test`: Alertmanager's own routing code on the reference file."""
    amtool = require_binary("amtool")
    result = run(
        [
            amtool,
            "config",
            "routes",
            "test",
            "--config.file",
            str(REPO / "deploy" / "alertmanager.yml"),
            *labels,
        ]
    )
    assert result.stdout.strip() == receivers, result.stdout


def test_promtool_check_prometheus_config() -> None:
    promtool = require_binary("promtool")
    result = run([promtool, "check", "config", str(REPO / "deploy" / "prometheus.yml")])
    # The config loads the repository's rules, not some other copy.
    assert "gpu-reclaimer.rules.yml" in result.stdout + result.stderr


def test_reference_config_timings() -> None:
    prom = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    assert prom["global"] == {"scrape_interval": "15s", "evaluation_interval": "15s"}
    assert next(j["job_name"] for j in prom["scrape_configs"]) == "gpu-exporter"
    am = yaml.safe_load((REPO / "deploy" / "alertmanager.yml").read_text())
    route = am["route"]
    assert (route["group_wait"], route["group_interval"]) == ("10s", "30s")
    assert {"node", "gpu", "pid", "alertname"} <= set(route["group_by"])
    reclaim, decisions, chat = route["routes"]
    assert reclaim["matchers"] == ['reclaim="true"'] and "continue" not in reclaim
    assert decisions["receiver"] == chat["receiver"] == "chat"
    (receiver,) = [r for r in am["receivers"] if r["name"] == reclaim["receiver"]]
    (hook,) = receiver["webhook_configs"]
    assert hook["url"].endswith(":9836/api/v1/alerts")
    assert hook["http_config"]["authorization"]["credentials_file"]
    (inhibit,) = am["inhibit_rules"]
    assert "GpuNvmlDown" in inhibit["source_matchers"][0]
    assert "GpuProcessIdle" in inhibit["target_matchers"][0]


def test_every_runbook_link_comes_from_one_base(tmp_path: Path) -> None:
    """The rule files, their tests and the PrometheusRule carry the same absolute links; the
    rewrite points them all at a site's base, anchors kept, and back."""
    from actuator.runbook import links, main, rule_files

    kube = (REPO / "deploy" / "kubernetes" / "prometheusrule.yaml").read_text()
    shipped = {link for p in rule_files(REPO) for link in links(p.read_text())}
    assert shipped and {link.partition("#")[0] for link in shipped} == {DEFAULT_BASE}
    in_rules = {
        link
        for p in rule_files(REPO)
        if p.name.endswith(".rules.yml")
        for link in links(p.read_text())
    }
    assert set(links(kube)) == in_rules  # generated from the rule files
    annotated = [a for a in alert_rules().values() if "annotations" in a]
    assert {a["annotations"]["runbook_url"] for a in annotated} == in_rules
    copy = tmp_path / "checkout"
    shutil.copytree(REPO / "alert-rules", copy / "alert-rules")
    assert main(["--base", "https://wiki.example.com/gpu/runbook/", "--root", str(copy)]) == 0
    moved = {link for p in rule_files(copy) for link in links(p.read_text())}
    assert {link.partition("#")[0] for link in moved} == {"https://wiki.example.com/gpu/runbook"}
    assert {link.partition("#")[2] for link in moved} == {
        link.partition("#")[2] for link in shipped
    }
    with pytest.raises(SystemExit):
        main(["--base", "wiki/runbook", "--root", str(copy)])


def test_alert_contract() -> None:
    rules = alert_rules()
    assert set(rules) == ALL_ALERTS
    runbook = (REPO / "docs" / "runbook.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", runbook, re.M)
    }
    carried = alert_labels()
    for name, rule in rules.items():
        labels, annotations = carried[name], rule.get("annotations", {})
        # GpuServiceIdle is information: a quiet service is not a fault (docs/runbook.md)
        assert labels["severity"] in (
            {"info"} if name == "GpuServiceIdle" else {"warning", "critical"}
        ), name
        assert labels["class"], name
        assert (labels.get("reclaim") == "true") == (name in RECLAIMABLE), name
        # Every alert has its runbook section, named after it (the link's anchor).
        assert name.lower() in anchors, name
        if name in RECLAIMABLE:
            # Machine to machine (routed to the actuator only): labels, no annotations, which
            # Prometheus would expand for every pending and firing alert at every evaluation.
            assert not annotations, name
            continue
        assert {"summary", "description", "runbook_url"} <= set(annotations), name
        # Absolute, from one base (actuator/runbook.py), and the anchor is a runbook section.
        base, _, anchor = annotations["runbook_url"].partition("#")
        assert base == DEFAULT_BASE and anchor == name.lower(), (name, anchor)
    for name in RECLAIMABLE:
        expr = rules[name]["expr"]
        joined = re.search(r"group_left \(([^)]*)\)\s*gpu_process_info", expr)
        assert joined, name
        exported = {label.strip() for label in joined.group(1).split(",")}
        # node comes from gpu_process_info; gpu, uuid, pid are on every per-process series.
        assert PROCESS_LABELS - {"gpu", "uuid", "pid"} <= exported, name
        assert parse_promql_duration(rules[name]["for"]) == 300, name
    # An alert on a series per process or per GPU takes its labels from its recorded
    # condition: an alert's `labels:` are templates, expanded for every pending and firing
    # alert at every evaluation, and cost 0.1 ms each per alert (docs/performance.md).
    for name in PER_SERIES_ALERTS:
        assert "labels" not in rules[name], name
        # Their annotations run no query: a template's `query` is one more PromQL query per
        # pending or firing alert at every evaluation (docs/alert-rules.md).
        for key, text in rules[name].get("annotations", {}).items():
            assert not re.search(r"\|\s*query\b|\{\{-?\s*query\b", text), (name, key)


def test_every_alert_is_tested_silent_and_firing() -> None:
    silent: set[str] = set()
    firing: set[str] = set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    assert silent >= ALL_ALERTS, ALL_ALERTS - silent
    assert firing >= ALL_ALERTS, ALL_ALERTS - firing


def test_rendered_rules_pass_promtool_check(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    written = render_rules(RULES_DIR, tmp_path, 1 / 15, eval_interval_s=1.0)
    assert [p.name for p in written] == [p.name for p in RULE_FILES]
    run([promtool, "check", "rules", *map(str, written)])


def _scale_times(case: dict[str, Any], scale: float) -> None:
    case["interval"] = format_promql_duration(
        parse_promql_duration(case.get("interval", "1m")) * scale
    )
    for section in ("alert_rule_test", "promql_expr_test"):
        for check in case.get(section, []):
            check["eval_time"] = format_promql_duration(
                parse_promql_duration(check["eval_time"]) * scale
            )
            for alert in check.get("exp_alerts") or []:
                # Annotations quote times and durations as text; the unscaled tests own them.
                alert.pop("exp_annotations", None)


def test_rendered_rules_pass_the_same_unit_tests_scaled(tmp_path: Path) -> None:
    """Scale 1/15: 15 s -> 1 s. Same samples per window, same verdicts, 15x sooner."""
    promtool = require_binary("promtool")
    scale = 1 / 15
    out = tmp_path / "alert-rules"
    for path in render_rules(RULES_DIR, out, scale, eval_interval_s=1.0):
        data = yaml.safe_load(path.read_text())
        for group in data["groups"]:
            for rule in group["rules"]:
                rule.pop("annotations", None)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    (out / "tests").mkdir()
    for path in TEST_FILES:
        data = yaml.safe_load(path.read_text())
        data["evaluation_interval"] = format_promql_duration(
            parse_promql_duration(data.get("evaluation_interval", "1m")) * scale
        )
        for case in data["tests"]:
            _scale_times(case, scale)
        (out / "tests" / path.name).write_text(yaml.safe_dump(data, sort_keys=False))
    rendered_tests = sorted(str(p.relative_to(out)) for p in (out / "tests").glob("*.test.yml"))
    assert len(rendered_tests) == len(TEST_FILES)
    result = run([promtool, "test", "rules", *rendered_tests], cwd=out)
    assert "FAILED" not in result.stdout + result.stderr


def test_rendered_unit_tests_can_fail(tmp_path: Path) -> None:
    """Guard against a vacuous pass: the scaled tests must fail against unscaled rules."""
    promtool = require_binary("promtool")
    out = tmp_path / "alert-rules"
    for path in render_rules(RULES_DIR, out, 1.0):
        data = yaml.safe_load(path.read_text())
        for group in data["groups"]:
            for rule in group["rules"]:
                rule.pop("annotations", None)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    (out / "tests").mkdir()
    source = RULES_DIR / "tests" / "idle.test.yml"
    data = yaml.safe_load(source.read_text())
    data["evaluation_interval"] = "1s"
    for case in data["tests"]:
        _scale_times(case, 1 / 15)
    (out / "tests" / source.name).write_text(yaml.safe_dump(data, sort_keys=False))
    result = subprocess.run(
        [promtool, "test", "rules", f"tests/{source.name}"],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr
