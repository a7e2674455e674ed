"""The statistics every benchmark reports by."""

from __future__ import annotations


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (0 <= q <= 1) of `values`; NaN of none (a run that gave
    up before anything was decided still reports what it measured)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
