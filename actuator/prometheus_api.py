"""The part of prometheus-api-client's `PrometheusConnect` that the readers of Prometheus use
(report, backtest, tune, the evidence pictures), as Protocols: each takes any object with
these methods, so a test may hand it a stand-in for one query and a real server for the rest."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol


class RangeQueries(Protocol):
    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any: ...


class PrometheusQueries(RangeQueries, Protocol):
    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any: ...
