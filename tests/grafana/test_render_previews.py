"""The previews draw a panel the way Grafana shows it: "No data" instead of empty axes,
the panel's axis label beside the unit, and, for a run recorded with time compressed,
one clock, the simulated one: time axes, hourly totals, the hour of day and idle hours.
The previews against a real Prometheus are in
test_grafana_dashboards.py."""

from __future__ import annotations

import json
import re
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
    assert previews.hours_since(1000.0, 1 / 240, [1000.0, 1015.0, 1030.0]) == [0.0, 1.0, 2.0]


def test_hourly_totals_of_a_compressed_run_are_bars_per_simulated_hour(previews: Any) -> None:
    """1 GiB freed in each compressed 15 s (1 simulated hour at 1/240): one bar of 1 GiB per
    simulated hour, each ending at its sample, not a rate's peak extrapolated to an hour."""
    panel = _panel("GPU memory freed per hour")
    assert panel["interval"] == "1h" and "increase(" in panel["targets"][0]["expr"]
    result = [{"metric": {}, "values": [[1000 + 15 * i, str(2**30)] for i in range(1, 5)]}]
    query = previews.Query(panel["title"], "A", "", "", False, result)
    figure, ax = _axes()
    previews.draw(ax, panel, [query], 1 / 240, 1000.0)
    bars = ax.patches
    assert [b.get_height() for b in bars] == [1.0] * 4
    assert [round(b.get_x(), 6) for b in bars] == [0.0, 1.0, 2.0, 3.0]
    assert [round(b.get_width(), 6) for b in bars] == [1.0] * 4
    assert ax.get_ylabel() == "GiB per simulated hour" and ax.get_xlabel() == "simulated hours"
    figure.clf()


def test_equal_series_are_one_line_and_every_series_has_its_own_colour(previews: Any) -> None:
    lines = [(f"GPU {i} total", [(0.0, 80.0), (1.0, 80.0)]) for i in range(4)]
    lines.append(("GPU 0", [(0.0, 3.0), (1.0, 5.0)]))
    assert previews.collapse_identical(lines) == [
        ("GPU 0 total (and 3 equal)", [(0.0, 80.0), (1.0, 80.0)]),
        ("GPU 0", [(0.0, 3.0), (1.0, 5.0)]),
    ]
    assert len(set(previews._colours(11))) == 11  # "Cases by state" has 11 states
    assert len(set(previews._colours(4))) == 4


def test_a_stacked_panel_is_drawn_stacked(previews: Any) -> None:
    panel = _panel("Cases by state")
    result = [
        {"metric": {"state": "reclaimed"}, "values": [[1000, "2"], [1015, "3"]]},
        {"metric": {"state": "notified"}, "values": [[1000, "1"], [1015, "1"]]},
    ]
    figure, ax = _axes()
    previews.draw(
        ax, panel, [previews.Query(panel["title"], "A", "", "", False, result)], 1 / 240, 1000.0
    )
    assert len(ax.collections) == 2 and not ax.get_lines()  # two filled layers
    top = ax.collections[1].get_paths()[0].vertices[:, 1].max()
    assert top == 4.0  # 3 reclaimed + 1 notified
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
    assert [t.get_text() for t in ax.texts] == ["0", "0", "none in this range"]
    figure.clf()


def test_bars_scale_to_their_largest_value(previews: Any) -> None:
    """Values under 0.08 on an axis to 0.09, not to 1.1."""
    panel = _panel("Refusals by reason (time range)")
    result = [{"metric": {"reason": r}, "value": [0, v]} for r, v in (("a", "0.05"), ("b", "0.08"))]
    figure, ax = _axes()
    previews.draw(ax, panel, [previews.Query(panel["title"], "A", "", "", True, result)])
    assert ax.get_xlim() == (0.0, 0.08 * 1.15)
    figure.clf()


def _fleet_panel(title: str) -> dict[str, Any]:
    dashboard = json.loads((GRAFANA / "dashboards" / "gpu-reclaimer-fleet.json").read_text())
    return next(p for p in dashboard["panels"] if p["title"] == title)


def test_idle_hours_of_a_compressed_run_are_simulated_hours(previews: Any) -> None:
    """0.1 real hours at 1/120 is 12 simulated GPU-hours, and the axis says which clock."""
    panel = _fleet_panel("Idle GPU-hours by user")
    assert previews.time_integral(panel["targets"][0]["expr"])
    result = [{"metric": {"user": "alice"}, "value": [0, "0.1"]}]
    figure, ax = _axes()
    previews.draw(ax, panel, [previews.Query(panel["title"], "A", "", "", True, result)], 1 / 120)
    (bar,) = ax.patches
    assert round(bar.get_width(), 9) == 12.0 and ax.get_xlabel() == "simulated GPU-hours"
    figure.clf()


def test_hour_of_day_of_a_compressed_run_is_the_simulated_hour_with_a_colour_scale(
    previews: Any,
) -> None:
    """At 1/120 samples 30 real seconds apart are an hour apart on the simulated clock,
    whatever hour the real clock said (the value); each stands for the hour before it, and
    the colour scale says what a full hour holds at that spacing."""
    panel = _fleet_panel("Idle GPU time by hour of day")
    start = 1_000_000.0
    samples = [[start + 30 * h, "13"] for h in range(1, 4)]  # the real clock: 13h all along
    result = [{"metric": {}, "values": samples}]
    figure, ax = _axes()
    previews.draw(
        ax, panel, [previews.Query(panel["title"], "A", "", "", False, result)], 1 / 120, start
    )
    grid = ax.images[0].get_array()
    assert [int(grid[h][0]) for h in range(4)] == [1, 1, 1, 0]
    assert ax.get_ylabel() == "simulated hour"
    assert len(figure.axes) == 2 and "1 = one GPU the whole hour" in figure.axes[1].get_ylabel()
    figure.clf()


def test_the_title_speaks_one_clock(previews: Any) -> None:
    assert previews.span_words(0, 731, 1 / 120).startswith(
        "24.4 simulated hours, recorded at 1/120"
    )
    assert previews.span_words(0, 7200, 1.0).endswith("+ 2.0 h")


def test_no_panel_scales_a_short_rate_to_an_hour() -> None:
    """Per-hour panels count each hour (`increase(...[$__interval])`, an interval of at least
    1h): a rate over a few scrapes times 3600 peaks as if it were an hour's total, and the
    previews draw no such series any more."""
    for path in (GRAFANA / "dashboards").glob("*.json"):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                assert not re.search(r"\*\s*3600\s*$", target["expr"]), (path.name, panel["title"])
