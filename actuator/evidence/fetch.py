"""Asks Prometheus for a picture's panels over its time range (prometheus-api-client's
`custom_query_range`, the client `report`, `backtest` and `tune` use)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from actuator.evidence.queries import Panel
from actuator.prometheus_api import RangeQueries


class FetchError(Exception):
    """Prometheus did not answer, or answered something that is not a range result."""


@dataclass(frozen=True)
class Series:
    times: tuple[float, ...]  # unix seconds
    values: tuple[float, ...]


@dataclass(frozen=True)
class PanelData:
    panel: Panel
    series: tuple[Series, ...]  # one per label set the query returned (usually one)


@dataclass(frozen=True)
class Evidence:
    """What a picture draws: each panel's samples, and where the idle rule held."""

    start: float
    end: float
    step: float
    panels: tuple[PanelData, ...]
    idle: tuple[float, ...]  # evaluation times at which gpu_process:idle_condition held

    @property
    def empty(self) -> bool:
        return not any(p.series for p in self.panels)


def fetch(
    prom: RangeQueries,
    panels: tuple[Panel, ...],
    idle_query: str,
    start: float,
    end: float,
    step: float,
    *,
    budget: float,
    timer: Callable[[], float] = time.monotonic,
) -> Evidence:
    """Every query within one `budget` of seconds for the whole picture: a slow Prometheus
    that answers each query just inside a per-query timeout must not hold a notice (and the
    reconciler's pass it is sent from) for six of them."""
    deadline = timer() + budget

    def series(query: str) -> tuple[Series, ...]:
        left = deadline - timer()
        if left <= 0:
            raise FetchError(f"out of time ({budget:g}s for the picture) before {query}")
        return _series(_ask(prom, query, start, end, step, left), query)

    found = tuple(PanelData(p, series(p.query)) for p in panels)
    idle = sorted({t for s in series(idle_query) for t in s.times})
    return Evidence(start, end, step, found, tuple(idle))


def _ask(prom: RangeQueries, query: str, start: float, end: float, step: float, left: float) -> Any:
    try:
        return prom.custom_query_range(
            query,
            start_time=datetime.fromtimestamp(start, UTC),
            end_time=datetime.fromtimestamp(end, UTC),
            step=f"{step:g}s",
            # Prometheus stops evaluating when the caller has stopped waiting.
            params={"timeout": f"{left:.3f}"},  # seconds
            timeout=left,
        )
    except Exception as exc:  # the client's own errors, requests', JSON's: all "no answer"
        raise FetchError(f"{type(exc).__name__}: {exc}") from None


def _series(result: Any, query: str) -> tuple[Series, ...]:
    """Prometheus's matrix as typed series; a sample that is not a finite number is left
    out (never drawn as 0)."""
    if not isinstance(result, list):
        raise FetchError(f"{query}: not a range result")
    out = []
    for item in result:
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(values, list):
            raise FetchError(f"{query}: not a range result")
        points = []
        for pair in values:
            try:
                t, v = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError):
                continue
            if math.isfinite(t) and math.isfinite(v):
                points.append((t, v))
        if points:
            out.append(Series(tuple(t for t, _ in points), tuple(v for _, v in points)))
    return tuple(out)
