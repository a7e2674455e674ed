"""Prometheus durations (`5m`, `1h30m`, `250ms`): parsed to seconds and written back, for
the rules' windows and `for:` (the demo's rescaling, the backtest)."""

from __future__ import annotations

import re

# Prometheus duration units, in seconds. Order matters for parsing ("ms" before "m").
_UNITS: dict[str, float] = {
    "y": 365 * 86400.0,
    "w": 7 * 86400.0,
    "d": 86400.0,
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 0.001,
}
DURATION = r"(?:\d+(?:ms|[smhdwy]))+"
_DURATION_PART = re.compile(r"(\d+)(ms|[smhdwy])")
_DURATION_RE = re.compile(rf"^{DURATION}$")


def parse_promql_duration(text: str) -> float:
    """Seconds in a Prometheus duration such as `5m`, `1h30m`, `250ms`."""
    text = text.strip()
    if not _DURATION_RE.match(text):
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[unit] for n, unit in _DURATION_PART.findall(text))


def format_promql_duration(seconds: float) -> str:
    """The shortest single-unit Prometheus duration for `seconds`, rounded to milliseconds."""
    ms = round(seconds * 1000)
    if ms < 0:
        raise ValueError(f"negative duration: {seconds}")
    if ms == 0:
        return "0s"
    for unit in ("h", "m", "s"):
        unit_ms = round(_UNITS[unit] * 1000)
        if ms % unit_ms == 0:
            return f"{ms // unit_ms}{unit}"
    return f"{ms}ms"
