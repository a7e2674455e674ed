"""A picture shades by the thresholds of the rules Prometheus really evaluates
(actuator/evidence/rules.py), read from a real Prometheus' rules API; when they cannot be
told, no picture is drawn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actuator.evidence.pictures import EvidencePictures
from actuator.evidence.rules import (
    EvaluatedThresholds,
    ThresholdsUnknown,
    rules_api,
    thresholds_of,
)
from actuator.notifications.notice import ProvenFacts
from exporter.thresholds import SHIPPED
from tests.helpers.cases import make_case, make_live
from tests.helpers.prom import Server, start_prometheus
from tests.support import REPO, free_port, wait_until

SHIPPED_RULES = REPO / "alert-rules" / "gpu-reclaimer.rules.yml"


@pytest.fixture
def tuned_prometheus(tmp_path: Path) -> Iterator[Server]:
    """Prometheus running the shipped rules with the site's own SM threshold (0.2)."""
    rules = tmp_path / "rules.yml"
    rules.write_text(
        SHIPPED_RULES.read_text().replace(
            "gpu_process:sm_utilization_ratio:max_window <= 0.05",
            "gpu_process:sm_utilization_ratio:max_window <= 0.2",
        )
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(f"global: {{evaluation_interval: 15s}}\nrule_files: [{rules}]\n")
    with start_prometheus(config, tmp_path) as server:
        yield server


def test_the_picture_uses_what_prometheus_evaluates_not_the_actuators_file(
    tuned_prometheus: Server,
) -> None:
    ask = rules_api(tuned_prometheus.url, 5.0)
    wait_until(lambda: ask()["data"]["groups"], 30)  # rules load just after /-/ready
    found = EvaluatedThresholds(ask).current()
    assert found.max_sm_util == 0.2 != SHIPPED.max_sm_util
    assert (found.max_cpu_cores, found.max_memory_growth_bytes) == (
        SHIPPED.max_cpu_cores,
        SHIPPED.max_memory_growth_bytes,
    )
    assert found.sample_window == SHIPPED.sample_window


def test_rules_that_do_not_state_the_thresholds_are_unknown() -> None:
    empty = {"status": "success", "data": {"groups": []}}
    with pytest.raises(ThresholdsUnknown, match="the rules Prometheus evaluates"):
        thresholds_of(empty)
    with pytest.raises(ThresholdsUnknown):
        thresholds_of({"status": "error"})


def test_rules_that_state_two_values_are_unknown_not_one_of_them() -> None:
    """Two rule files in one Prometheus, two SM thresholds: which one the alert used cannot
    be told, so neither is drawn."""
    rules = SHIPPED_RULES.read_text()
    expression = next(line for line in rules.splitlines() if "max_window <= 0.05" in line)
    groups = [
        {"rules": [{"query": rules}]},
        {"rules": [{"query": expression.replace("0.05", "0.2")}]},
    ]
    with pytest.raises(ThresholdsUnknown, match="max_sm_util"):
        thresholds_of({"status": "success", "data": {"groups": groups}})


class _NoQueries:
    def custom_query_range(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("no picture may be asked for without its thresholds")


def test_no_picture_when_the_thresholds_cannot_be_told(tmp_path: Path) -> None:
    away = EvaluatedThresholds(rules_api(f"http://127.0.0.1:{free_port()}", 1.0))
    pictures = EvidencePictures(_NoQueries(), None, away.current, span=3600.0)  # type: ignore[arg-type]
    case = make_case()
    case.facts = ProvenFacts.from_live(case, make_live()).to_json()
    assert pictures.take(case) is None
