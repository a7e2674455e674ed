"""The previews draw a panel the way Grafana shows it: "No data" instead of empty axes,
the panel's axis label beside the unit, and, for a run recorded with time compressed,
simulated hours on the time axis and rates per simulated hour (not compressed seconds
extrapolated to an hour). The previews against a real Prometheus are in
test_grafana_dashboards.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.previews import previews_module

GRAFANA = Path(__file__).resolve().parents[2] / "grafana"


@pytest.fixture(scope="module")
def previews() -> Any:
    return previews_module()


def _panel(title: str) -> dict[str, Any]:
    dashboard = json.loads((GRAFANA / "dashboards" / "gpu-reclaimer-actuator.json").read_text())
    return next(p for p in dashboard["panels"] if p["title"] == title)


def _axes() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots()
    return figure, ax


def test_labels_say_what_is_counted_and_per_which_hour(previews: Any) -> None:
    cases = _panel("Cases by state")
    assert previews.y_label(cases, "", 1.0) == "cases"
    freed = _panel("GPU memory freed per hour")
    assert previews.y_label(freed, "GiB", 1.0) == "GiB per hour"
    assert previews.y_label(freed, "GiB", 1 / 240) == "GiB per simulated hour"
    assert previews.per_hour(freed["targets"][0]["expr"])
    assert not previews.per_hour(cases["targets"][0]["expr"])
    assert previews.hours_since(1000.0, 1 / 240, [1000.0, 1015.0, 1030.0]) == [0.0, 1.0, 2.0]


def test_a_per_hour_rate_of_a_compressed_run_is_per_simulated_hour(previews: Any) -> None:
    """1 GiB freed per compressed 15 s (1 simulated hour) reads 1 GiB per simulated hour,
    not the 240 GiB per hour the rate extrapolates to in real time."""
    panel = _panel("GPU memory freed per hour")
    per_real_hour = 240 * 2**30
    result = [{"metric": {}, "values": [[1000 + 15 * i, str(per_real_hour)] for i in range(5)]}]
    query = previews.Query(panel["title"], "A", "", "", False, result)
    figure, ax = _axes()
    previews.draw(ax, panel, [query], 1 / 240, 1000.0)
    (line,) = ax.get_lines()
    assert list(line.get_ydata()) == [1.0] * 5
    assert list(line.get_xdata()) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert ax.get_ylabel() == "GiB per simulated hour" and ax.get_xlabel() == "simulated hours"
    figure.clf()


def test_a_panel_with_no_series_says_no_data_without_empty_axes(previews: Any) -> None:
    panel = _panel("Refusals by reason (time range)")
    figure, ax = _axes()
    previews.draw(ax, panel, [previews.Query(panel["title"], "A", "", "", True, [])])
    assert [t.get_text() for t in ax.texts] == ["No data"]
    assert list(ax.get_xticks()) == [] and list(ax.get_yticks()) == []
    assert not ax.patches  # no bars
    figure.clf()


def test_a_bar_gauge_of_zeros_shows_zeros_from_zero(previews: Any) -> None:
    """Counters that exist but never moved (no refusal in the range): each reason with 0,
    on a scale from 0, not empty axes around 0."""
    panel = _panel("Refusals by reason (time range)")
    result = [{"metric": {"reason": r}, "value": [0, "0"]} for r in ("protected", "bad_target")]
    figure, ax = _axes()
    previews.draw(ax, panel, [previews.Query(panel["title"], "A", "", "", True, result)])
    assert ax.get_xlim()[0] == 0 and ax.get_xlim()[1] > 0
    assert [t.get_text() for t in ax.texts] == ["0", "0"]
    figure.clf()
