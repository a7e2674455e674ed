"""The statistics every benchmark reports by."""

from __future__ import annotations


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (0 <= q <= 1) of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
