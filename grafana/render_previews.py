"""Render PNG previews of the dashboards' main panels from a real Prometheus, for readers
without Grafana (run with the project's environment, after `make setup`):

    python grafana/render_previews.py --prometheus http://127.0.0.1:9090 --since 30m
    python grafana/render_previews.py --prometheus URL --since 2026-12-01T08:00 \\
        --until 2026-12-01T09:00 --out docs/previews

Every query comes from the dashboard JSON itself (grafana/dashboards/), with the template
variables at "All" and Grafana's own variables substituted the way Grafana would, so a
preview shows what the panel would; tests/grafana/test_grafana_dashboards.py checks that
the previews run exactly the dashboards' queries. One PNG per dashboard.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from itertools import pairwise
from pathlib import Path
from typing import Any

DASHBOARDS = Path(__file__).resolve().parent / "dashboards"
# The main panels of each dashboard, in the order they are drawn.
PREVIEWS: dict[str, tuple[str, ...]] = {
    "gpu-reclaimer-fleet.json": (
        "GPU utilisation",
        "GPU memory used",
        "Idle GPU time per GPU",
        "Idle GPU time by hour of day",
        "Idle GPU-hours by user",
        "Idle memory by project (GiB-hours)",
    ),
    "gpu-reclaimer-actuator.json": (
        "Cases opened, released, failed",
        "Cases by state",
        "GPU memory freed per hour",
        "Refusals by reason (time range)",
    ),
}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
_HOURS = re.compile(r"\*\s*\$__interval_ms\s*/\s*3600000\s*$")
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


@dataclass
class Query:
    """One target as run: the dashboard's expression and the expanded one."""

    panel: str
    ref: str
    expr: str
    expanded: str
    instant: bool
    result: list[dict[str, Any]] = field(default_factory=list)


def seconds(text: str) -> int:
    found = re.fullmatch(r"(\d+)([smhd]?)", text)
    if not found:
        raise ValueError(text)
    return int(found.group(1)) * _UNITS[found.group(2) or "s"]


def expand(expr: str, values: dict[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name not in values:
            raise SystemExit(f"render_previews: the query uses ${name}, which has no value")
        return values[name]

    return _VARIABLE.sub(substitute, expr)


def variable_values(dashboard: dict[str, Any]) -> dict[str, str]:
    values = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            values[variable["name"]] = variable["allValue"]
        elif variable["type"] == "custom":
            values[variable["name"]] = variable["current"]["value"]
    return values


# Grafana's $__interval is the range over the panel's max data points, by default its width
# in pixels: a half-width panel on a laptop is about 800.
POINTS = 800


def panel_interval(panel: dict[str, Any], range_s: int, scrape_s: float, scale: float) -> int:
    """Grafana's $__interval: the range over POINTS, at least the panel's minimum (x the
    time scale, for data recorded by the compressed demo)."""
    minimum = seconds(panel["interval"]) * scale if panel.get("interval") else scrape_s
    return max(1, math.ceil(minimum), math.ceil(range_s / POINTS))


def run_queries(
    prom: Any,
    dashboard: dict[str, Any],
    titles: Iterable[str],
    start: float,
    end: float,
    scrape_s: int,
    scale: float = 1.0,
) -> list[Query]:
    panels = {p["title"]: p for p in dashboard["panels"]}
    range_s = int(end - start)
    values = variable_values(dashboard)
    done = []
    for title in titles:
        panel = panels[title]
        interval = panel_interval(panel, range_s, scrape_s, scale)
        builtins = {
            "__interval": f"{interval}s",
            "__interval_ms": str(interval * 1000),
            "__rate_interval": f"{max(4 * scrape_s, interval + scrape_s)}s",
            "__range": f"{range_s}s",
            "__range_s": str(range_s),
            "__range_ms": str(range_s * 1000),
        }
        for target in panel["targets"]:
            expanded = expand(target["expr"], values | builtins)
            query = Query(title, target["refId"], target["expr"], expanded, target["instant"])
            if query.instant:
                query.result = prom.custom_query(expanded, params={"time": end})
            else:
                query.result = prom.custom_query_range(
                    expanded,
                    start_time=datetime.fromtimestamp(start),
                    end_time=datetime.fromtimestamp(end),
                    step=f"{interval}s",
                )
            done.append(query)
    return done


def legend(target: dict[str, Any], metric: dict[str, str]) -> str:
    text = target.get("legendFormat", "")
    if not text or text == "__auto":
        return ", ".join(f"{k}={v}" for k, v in sorted(metric.items())) or "value"
    return _LEGEND.sub(lambda m: metric.get(m.group(1), ""), text)


def _scale(unit: str, values: list[float]) -> tuple[float, str]:
    if unit == "bytes":
        top = max((abs(v) for v in values), default=0.0)
        power = 0
        while top >= 1024 and power < len(_BYTE_UNITS) - 1:
            top, power = top / 1024, power + 1
        return 1024.0**power, _BYTE_UNITS[power]
    if unit == "percentunit":
        return 0.01, "%"
    return 1.0, {"h": "hours", "s": "seconds"}.get(unit, "")


def y_label(panel: dict[str, Any], suffix: str, scale: float) -> str:
    """The unit's suffix and the panel's axis label, as Grafana shows them; for data
    recorded with time compressed, rates are per simulated hour."""
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
    label = str(custom.get("axisLabel", ""))
    if scale != 1:
        label = label.replace("per hour", "per simulated hour")
    return " ".join(part for part in (suffix, label) if part)


def hours_since(start: float, scale: float, times: Iterable[float]) -> list[float]:
    """Simulated hours from the start, for data recorded with time compressed."""
    return [(t - start) / scale / 3600 for t in times]


def no_data(ax: Any) -> None:
    """What Grafana shows for a panel with no series: the words, no empty axes."""
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    ax.text(0.5, 0.5, "No data", ha="center", va="center", transform=ax.transAxes, color="grey")


def draw(
    ax: Any, panel: dict[str, Any], queries: list[Query], scale: float = 1.0, start: float = 0.0
) -> None:
    """One panel. With `scale` below 1 (a compressed run), the time axis counts simulated
    hours from `start`, hourly totals are per simulated hour (a panel's 1 h interval shrinks
    with the scale), and idle hours are simulated hours."""
    import matplotlib.dates as mdates

    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    targets = {t["refId"]: t for t in panel["targets"]}
    ax.set_title(panel["title"], fontsize=10, loc="left")
    if not any(q.result for q in queries):
        no_data(ax)
        return
    if panel["type"] == "heatmap":
        _heatmap(ax, panel, queries, scale, start)
        return
    if panel["type"] == "bargauge":
        bars = [
            (legend(targets[q.ref], r["metric"]), float(r["value"][1]))
            for q in queries
            for r in q.result
        ]
        bars.sort(key=lambda b: b[1])
        # Hours over the range on the recorded clock: simulated hours for a compressed run.
        hours = all(time_integral(targets[q.ref]["expr"]) for q in queries)
        clock = scale if hours else 1.0
        divisor, suffix = _scale(unit, [b[1] / clock for b in bars])
        values = [b[1] / clock / divisor for b in bars]
        ax.barh([b[0] for b in bars], values, color="#f2a33a")
        # Like Grafana's bar gauge: each bar's value beside it, the scale from 0 to the
        # largest (all zero: zeros on a unit scale, and said in words).
        top = max(values) if any(values) else 1.0
        ax.set_xlim(0, top * 1.15)
        for y, value in enumerate(values):
            ax.text(value + top * 0.01, y, f"{value:.3g}", va="center", fontsize=7)
        if not any(values):
            ax.text(
                0.5,
                0.5,
                "none in this range",
                ha="center",
                va="center",
                transform=ax.transAxes,
                color="grey",
            )
        label = y_label(panel, suffix, scale)
        if hours:  # one clock: the recorded one, or the simulated one of a compressed run
            what = "GiB-hours" if "GiB" in panel["title"] else "GPU-hours"
            label = f"simulated {what}" if scale != 1 else what
        ax.set_xlabel(label)
        return
    everything = [float(v) for q in queries for r in q.result for _, v in r["values"]]
    divisor, suffix = _scale(unit, everything)
    lines = [
        (
            legend(targets[q.ref], r["metric"]),
            [(float(t), float(v) / divisor) for t, v in r["values"]],
        )
        for q in queries
        for r in q.result
    ]
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
    stacked = custom.get("stacking", {}).get("mode") == "normal"
    bars = custom.get("drawStyle") == "bars"
    # Stacked, equal series are layers of their own; a layer of zeros adds nothing to see
    # and is left out of the legend (said in its title). Lines: equal ones drawn once.
    left_out = [label for label, points in lines if stacked and not any(v for _, v in points)]
    lines = (
        [(label, points) for label, points in lines if label not in left_out]
        if stacked
        else collapse_identical(lines)
    )
    colours = _colours(len(lines))
    if bars:
        _hourly_bars(ax, lines, colours, start, scale, int(panel_step(queries)))
    elif stacked:
        _stacked(ax, lines, colours, start, scale)
    else:
        for (label, points), colour in zip(lines, colours, strict=True):
            ax.plot(
                _times([t for t, _ in points], start, scale),
                [v for _, v in points],
                linewidth=1.2,
                label=label,
                color=colour,
            )
    ax.set_ylabel(y_label(panel, suffix, scale))
    if scale != 1:
        ax.set_xlabel("simulated hours")
    else:
        ax.xaxis.set_major_formatter(mdates.DateFormatter(_clock(queries)))
    title = f"0 throughout: {', '.join(left_out)}" if left_out else None
    ax.legend(
        fontsize=7,
        loc="upper left",
        ncol=2 if len(lines) > 6 else 1,
        title=title,
        title_fontsize=6,
    )


def time_integral(expr: str) -> bool:
    """Hours over the range (the idle bars: samples times `$__interval_ms / 3600000`)."""
    return bool(_HOURS.search(expr))


def collapse_identical(
    lines: list[tuple[str, list[tuple[float, float]]]],
) -> list[tuple[str, list[tuple[float, float]]]]:
    """Series with the very same points drawn once, named for all of them (four GPUs' equal
    totals are one line, not four hiding each other under four legend entries)."""
    groups: dict[tuple[tuple[float, float], ...], list[str]] = {}
    for label, points in lines:
        groups.setdefault(tuple(points), []).append(label)
    drawn = []
    for same, labels in groups.items():
        name = labels[0] if len(labels) == 1 else f"{labels[0]} (and {len(labels) - 1} equal)"
        drawn.append((name, list(same)))
    return drawn


def _colours(n: int) -> list[Any]:
    """A colour of its own for every series: matplotlib's ten, or twenty beyond ten."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _times(stamps: list[float], start: float, scale: float) -> list[Any]:
    return (
        hours_since(start, scale, stamps)
        if scale != 1
        else [datetime.fromtimestamp(t) for t in stamps]
    )


def panel_step(queries: list[Query]) -> float:
    """The panel's step: the smallest gap between samples."""
    stamps = sorted({float(t) for q in queries for r in q.result for t, _ in r.get("values", [])})
    gaps = [b - a for a, b in pairwise(stamps) if b > a]
    return min(gaps) if gaps else 1.0


def _stacked(
    ax: Any,
    lines: list[tuple[str, list[tuple[float, float]]]],
    colours: list[Any],
    start: float,
    scale: float,
) -> None:
    """Grafana's normal stacking: each series on top of the ones before, as steps."""
    stamps = sorted({t for _, points in lines for t, _ in points})
    values = [dict(points) for _, points in lines]
    rows = [[v.get(t, 0.0) for t in stamps] for v in values]
    ax.stackplot(
        _times(stamps, start, scale),
        rows,
        labels=[label for label, _ in lines],
        colors=colours,
        step="post",
        alpha=0.8,
    )


def _hourly_bars(
    ax: Any,
    lines: list[tuple[str, list[tuple[float, float]]]],
    colours: list[Any],
    start: float,
    scale: float,
    step: int,
) -> None:
    """Each interval's totals as bars side by side, each ending at its sample's time (an
    `increase` over the interval before it)."""
    import matplotlib.dates as mdates

    # The interval in the time axis's own unit: simulated hours, or matplotlib's days.
    width = step / scale / 3600 if scale != 1 else step / 86400
    share = width / max(1, len(lines))
    for i, ((label, points), colour) in enumerate(zip(lines, colours, strict=True)):
        stamps = [t for t, _ in points]
        ends = (
            hours_since(start, scale, stamps)
            if scale != 1
            else [float(mdates.date2num(datetime.fromtimestamp(t))) for t in stamps]
        )
        xs = [x - width + share * i for x in ends]
        ax.bar(xs, [v for _, v in points], width=share, align="edge", label=label, color=colour)
    if scale == 1:
        ax.xaxis_date()


def _clock(queries: list[Query]) -> str:
    """Seconds on the time axis when the data spans less than an hour (the demo's)."""
    times = [float(t) for q in queries for r in q.result for t, _ in r.get("values", [])]
    return "%H:%M:%S" if times and max(times) - min(times) < 3600 else "%H:%M"


def _heatmap(
    ax: Any, panel: dict[str, Any], queries: list[Query], scale: float, start: float
) -> None:
    options = panel["options"]
    series = [r for q in queries for r in q.result]
    if not options["calculate"]:  # one row per series, coloured by value
        target = panel["targets"][0]
        rows = sorted(series, key=lambda r: legend(target, r["metric"]))
        times = sorted({float(t) for r in rows for t, _ in r["values"]})
        column = {t: i for i, t in enumerate(times)}
        grid = [[math.nan] * len(times) for _ in rows]
        for y, r in enumerate(rows):
            for t, v in r["values"]:
                grid[y][column[float(t)]] = float(v)
        image = ax.imshow(
            grid,
            aspect="auto",
            cmap="Oranges",
            vmin=0,
            vmax=1,
            interpolation="none",
            extent=(0, len(times), len(rows), 0),
        )
        ax.figure.colorbar(image, ax=ax, label="share of the interval idle", pad=0.01)
        ax.set_yticks(
            [i + 0.5 for i in range(len(rows))],
            [legend(target, r["metric"]) for r in rows],
            fontsize=7,
        )
        step = max(1, len(times) // 6)
        ticks = (
            [f"{h:.1f} h" for h in hours_since(start, scale, times[::step])]
            if scale != 1
            else [time.strftime(_clock(queries), time.localtime(t)) for t in times[::step]]
        )
        ax.set_xticks(range(0, len(times), step), ticks)
        return
    # Grafana's calculated heatmap: count samples per (x bucket, y bucket).
    x_size = seconds(options["calculation"]["xBuckets"]["value"])
    top = 24 if "hour of day" in panel["title"] else 168
    counts: dict[tuple[int, int], int] = defaultdict(int)
    last = max((float(t) for r in series for t, _ in r["values"]), default=start)
    for r in series:
        for t, v in r["values"]:
            if scale != 1:
                # The query's hour is the recording's real clock; one clock for the whole
                # picture: the simulated one, from the run's start. A sample stands for
                # the interval before it (the last one, at the range's end, for its last
                # hour, not the next day's first).
                simulated = max(0.0, (float(t) - start) / scale - 1e-6)
                # A scale given rounded (0.00833 for 1/120) must not push the range's last
                # sample into a day of its own.
                simulated = min(simulated, max(0.0, (last - start) / scale - 1e-6))
                counts[(int(simulated // x_size), int(simulated // 3600) % top)] += 1
            else:
                counts[(int(float(t) // x_size), int(float(v)))] += 1
    xs = sorted({x for x, _ in counts})
    grid = [[counts.get((x, y), 0) for x in xs] for y in range(top)]
    image = ax.imshow(grid, aspect="auto", cmap="Oranges", origin="lower", interpolation="none")
    unit = "hour" if top == 24 else "hour of the week"
    per_hour = round(3600 / (panel_step(queries) / scale))  # samples an idle GPU-hour holds
    ax.figure.colorbar(
        image, ax=ax, pad=0.01, label=f"idle GPU samples ({per_hour} = one GPU the whole hour)"
    )
    if scale != 1:
        ax.set_xticks(range(len(xs)), [f"day {x + 1}" for x in xs])
        ax.set_ylabel(f"simulated {unit}")
    else:
        ax.set_xticks(range(len(xs)), [time.strftime("%m-%d", time.gmtime(x * x_size)) for x in xs])
        ax.set_ylabel(unit)


def span_words(start: float, end: float, scale: float) -> str:
    """The range in the picture's one clock: simulated hours for a compressed run (with when
    it was recorded), else the real range."""
    began = time.strftime("%Y-%m-%d %H:%M", time.localtime(start))
    if scale != 1:
        return (
            f"{(end - start) / scale / 3600:.1f} simulated hours, recorded at "
            f"1/{1 / scale:g} time from {began}"
        )
    hours = (end - start) / 3600
    return f"{began} + {hours:.1f} h" if hours >= 1 else f"{began} + {(end - start) / 60:.0f} min"


def render(
    prom: Any, start: float, end: float, out: Path, scrape_s: int, scale: float = 1.0
) -> list[Query]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    everything: list[Query] = []
    for name, titles in PREVIEWS.items():
        dashboard = json.loads((DASHBOARDS / name).read_text(encoding="utf-8"))
        queries = run_queries(prom, dashboard, titles, start, end, scrape_s, scale)
        everything += queries
        panels = {p["title"]: p for p in dashboard["panels"]}
        rows = math.ceil(len(titles) / 2)
        figure, axes = plt.subplots(rows, 2, figsize=(14, 3.6 * rows), squeeze=False)
        for ax, title in zip(axes.flat, titles, strict=False):
            draw(ax, panels[title], [q for q in queries if q.panel == title], scale, start)
        for ax in list(axes.flat)[len(titles) :]:
            ax.axis("off")
        figure.suptitle(f"{dashboard['title']} ({span_words(start, end, scale)})", fontsize=12)
        figure.tight_layout()
        figure.savefig(out / name.replace(".json", ".png"), dpi=80)
        plt.close(figure)
    return everything


def fraction(text: str) -> float:
    """A time scale: 0.00833, or as the demo states it, 1/120."""
    try:
        value = float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a scale: {text!r} (e.g. 1/120 or 0.00833)") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"a scale is above 0 and at most 1, not {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--prometheus", required=True, metavar="URL")
    parser.add_argument(
        "--since", required=True, help="a duration back from --until (30m) or unix seconds"
    )
    parser.add_argument("--until", help="unix seconds (default: now)")
    parser.add_argument(
        "--scrape-interval",
        default="15s",
        help="the data source's scrape interval, for $__rate_interval",
    )
    parser.add_argument(
        "--scale",
        type=fraction,
        default=1.0,
        help="time scale the data was recorded at (the demo's: 1/15; the day's: 1/120): "
        "panels' minimum intervals shrink by it",
    )
    parser.add_argument("--out", type=Path, default=Path("docs/previews"))
    args = parser.parse_args(argv)
    end = float(args.until) if args.until else time.time()
    relative = _RELATIVE.match(args.since)
    start = end - seconds(args.since) if relative else float(args.since)

    from prometheus_api_client import PrometheusConnect

    prom = PrometheusConnect(url=args.prometheus)
    queries = render(prom, start, end, args.out, seconds(args.scrape_interval), args.scale)
    empty = sorted({f"{q.panel} [{q.ref}]" for q in queries if not q.result})
    print(
        f"wrote {len(PREVIEWS)} previews to {args.out}"
        + (f"; no data for: {', '.join(empty)}" if empty else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
