"""Draws an evidence picture: one small panel per rule input, the rule's threshold as a
dashed line, and the time the idle rule held shaded, as a PNG.

matplotlib (the `evidence` extra) is imported here only, through its object API (one
Figure per picture, no pyplot state), so pictures drawn in parallel threads never share a
figure. Text in the picture is the actuator's own (titles, units, the node's name, the
PID): no text a user chose, and math parsing off, so nothing in it is interpreted."""

from __future__ import annotations

import io
from collections.abc import Iterator

from actuator.evidence.fetch import Evidence, PanelData

WIDTH, HEIGHT, DPI = 6.4, 6.0, 100  # a 640 x 600 pixel picture
_GIB = float(2**30)
IDLE_COLOUR, LIMIT_COLOUR, LINE_COLOUR = "#f6c28b", "#c0392b", "#1f5fa8"


class ChartUnavailable(Exception):
    """matplotlib is not installed: pictures need the `evidence` extra."""


def available() -> str:
    """'' when pictures can be drawn, else why not (for start-up checks)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install 'gpu-reclaimer[evidence]')"
    return ""


def render(evidence: Evidence, title: str) -> bytes:
    """The picture as PNG bytes."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ChartUnavailable(available()) from None
    figure = Figure(figsize=(WIDTH, HEIGHT), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(evidence.panels), 1, sharex=True, squeeze=False)[:, 0]
    idle_spans = list(_spans(evidence.idle, evidence.step))
    for ax, data in zip(axes, evidence.panels, strict=True):
        _panel(ax, data, evidence, idle_spans)
    axes[-1].set_xlabel("minutes before this notice", parse_math=False)
    axes[-1].set_xlim(_minutes(evidence.start, evidence.end), 0.0)
    figure.suptitle(title, fontsize=10, parse_math=False)
    out = io.BytesIO()
    figure.savefig(out, format="png", metadata={"Software": "gpu-reclaimer"})
    return out.getvalue()


def _minutes(t: float, end: float) -> float:
    return (t - end) / 60.0


def _spans(times: tuple[float, ...], step: float) -> Iterator[tuple[float, float]]:
    """Runs of consecutive evaluation times (at most 1.5 steps apart) as (from, to)."""
    start = previous = None
    for t in times:
        if previous is not None and t - previous > 1.5 * step:
            yield start, previous  # type: ignore[misc]
            start = None
        if start is None:
            start = t
        previous = t
    if start is not None and previous is not None:
        yield start, previous + step


def _panel(
    ax: object, data: PanelData, evidence: Evidence, idle: list[tuple[float, float]]
) -> None:
    from matplotlib.axes import Axes

    assert isinstance(ax, Axes)
    panel, end = data.panel, evidence.end
    factor = 1 / _GIB if panel.unit == "bytes" else 100.0 if panel.unit == "ratio" else 1.0
    unit = {"bytes": "GiB", "ratio": "%", "cores": "cores", "writes": "writes"}[panel.unit]
    for a, b in idle:
        ax.axvspan(_minutes(a, end), _minutes(b, end), color=IDLE_COLOUR, alpha=0.5, lw=0)
    for series in data.series:
        ax.plot(
            [_minutes(t, end) for t in series.times],
            [v * factor for v in series.values],
            color=LINE_COLOUR,
            lw=1.2,
            marker="o" if len(series.times) < 30 else None,  # a few samples: each one shown
            markersize=2.5,
        )
    if panel.threshold is not None:
        ax.axhline(panel.threshold * factor, color=LIMIT_COLOUR, ls="--", lw=1)
        label = f"idle at or below {panel.threshold * factor:g} {unit}"
        ax.text(
            0.99,
            0.92,
            label,
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=7,
            color=LIMIT_COLOUR,
            parse_math=False,
        )
    if not data.series:
        ax.text(
            0.5,
            0.5,
            "no data in Prometheus",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="grey",
            parse_math=False,
        )
    ax.set_title(panel.title, fontsize=8, loc="left", parse_math=False)
    ax.set_ylabel(unit, fontsize=7, parse_math=False)
    ax.tick_params(labelsize=7)
    # Zero sits just above the axis, so an idle process's flat line stays visible.
    top = 100.0 if panel.unit == "ratio" else max(ax.get_ylim()[1], 1e-9)
    if panel.threshold and panel.unit != "ratio":  # room above the threshold for its label
        top = max(top, panel.threshold * factor * 1.6)
    ax.set_ylim(-0.04 * top, top * 1.04)
    ax.grid(True, lw=0.3, alpha=0.6)
