"""The panels asked of a real Prometheus holding a known history, read back as typed series;
Prometheus away or answering nonsense is a fetch error, never a picture."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actuator.evidence.fetch import FetchError, fetch
from actuator.evidence.queries import Subject, idle_query, panels
from exporter.thresholds import SHIPPED
from tests.helpers.history import GiB, M, backfilled_history
from tests.helpers.prom import Server


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, int]]:
    with backfilled_history(tmp_path_factory.mktemp("history")) as found:
        yield found


def _connect(url: str, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    return PrometheusConnect(url=url, timeout=timeout, retry=Retry(0))


def _connect(url: str, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    return PrometheusConnect(url=url, timeout=timeout, retry=Retry(0))


def test_a_process_idle_for_an_hour_reads_as_the_rule_saw_it(history) -> None:
    prom, start = history
    subject = Subject("GPU-0", 100, start_time=start - 86400)  # idle from minute 10 to 70
    begin, end = start, start + 120 * M
    evidence = fetch(
        _connect(prom.url), panels(subject, SHIPPED), idle_query(subject), begin, end, 60, budget=30
    )
    sm, memory, cpu, writes = evidence.panels
    ((util,),) = [sm.series]
    by_minute = {round((t - start) / M): v for t, v in zip(util.times, util.values, strict=True)}
    assert by_minute[40] == 0.0 and by_minute[100] == pytest.approx(0.9)
    assert by_minute[11] == 0.0  # the 1 m window's highest: minute 10 already idle
    assert set(memory.series[0].values) == {4 * GiB}
    assert set(cpu.series[0].values) == {0.0}  # the counter never moved
    assert writes.series == ()  # no heartbeat, no log: nothing drawn, never a made-up 0
    assert evidence.idle == ()  # the rules do not run in this Prometheus: nothing shaded
    # Another PID on the same GPU is another process: its own readings.
    other = Subject("GPU-0", 300, start_time=start - 86400)
    (busy,) = fetch(
        _connect(prom.url), panels(other, SHIPPED)[:1], idle_query(other), begin, end, 60, budget=30
    ).panels
    assert set(busy.series[0].values) == {0.5}


def test_prometheus_away_or_answering_nonsense_is_a_fetch_error() -> None:
    from tests.support import free_port

    subject = Subject("GPU-0", 100, start_time=0)
    away = _connect(f"http://127.0.0.1:{free_port()}", timeout=1)
    with pytest.raises(FetchError):
        fetch(away, panels(subject, SHIPPED), idle_query(subject), 0, 3600, 60, budget=5)

    class Nonsense:
        def custom_query_range(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return {"resultType": "vector"}

    with pytest.raises(FetchError, match="not a range result"):
        fetch(Nonsense(), panels(subject, SHIPPED), idle_query(subject), 0, 3600, 60, budget=5)
