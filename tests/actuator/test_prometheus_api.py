"""The Protocols the readers of Prometheus take are the calls prometheus-api-client makes:
every parameter they name exists on `PrometheusConnect` with the same name and kind, so an
upgrade that renames one fails here, not in a report at 3 a.m."""

from __future__ import annotations

import inspect

import pytest
from prometheus_api_client import PrometheusConnect

from actuator.prometheus_api import PrometheusQueries


@pytest.mark.parametrize("method", ["custom_query", "custom_query_range"])
def test_the_protocol_is_the_real_clients_call(method: str) -> None:
    ours = inspect.signature(getattr(PrometheusQueries, method)).parameters
    theirs = inspect.signature(getattr(PrometheusConnect, method)).parameters
    assert list(ours) == [name for name in theirs if name in ours]  # same order
    for name, parameter in ours.items():
        assert name in theirs, f"PrometheusConnect.{method} has no {name!r}"
        assert theirs[name].kind == parameter.kind
        assert (theirs[name].default is inspect.Parameter.empty) == (
            parameter.default is inspect.Parameter.empty
        ), name
    required = [n for n, p in theirs.items() if p.default is inspect.Parameter.empty]
    assert set(required) <= set(ours)  # nothing the client needs is left out
