"""Pictures: none (and no wait on Prometheus for a while) when Prometheus is away; kept
with their case and pruned with it on SQLite and PostgreSQL. The whole path (exporter,
Prometheus, mail, keep page in a browser) is tests/actuator/test_keep_browser.py's."""

from __future__ import annotations

from pathlib import Path

from actuator.evidence.pictures import EvidencePictures
from actuator.store import Store, open_store
from exporter.thresholds import SHIPPED
from tests.helpers.cases import make_case


def test_a_picture_is_kept_with_its_case_and_pruned_with_it(database: str) -> None:
    from actuator.models import State
    from actuator.store.cases import insert_case

    store = open_store(database)
    store.init()
    case = make_case(id=5, state=State.RECLAIMED, updated=1000.0)
    with store._tx() as conn:
        insert_case(conn, case, {})
    png = bytes(range(256)) * 4  # every byte value survives (BLOB, BYTEA)
    first = store.save_picture(case.id, 1.0, png)
    second = store.save_picture(case.id, 2.0, b"\x89PNG two")
    assert store.latest_picture(case.id) == second
    assert store.picture(case.id, first) == png
    assert store.picture(case.id + 1, first) is None  # a picture belongs to its own case
    assert store.prune(before=2000.0) == 1
    assert store.picture(case.id, second) is None and store.latest_picture(case.id) is None


def test_prometheus_away_means_no_picture_and_no_wait_on_it_for_a_while(tmp_path: Path) -> None:
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    from tests.support import free_port

    away = PrometheusConnect(url=f"http://127.0.0.1:{free_port()}", timeout=1, retry=Retry(0))
    store = Store(tmp_path / "store.db")
    store.init()
    case = make_case(facts={"node": "n", "pid": 4242, "gpu_uuid": "GPU-0"})
    now = [10_000.0]
    pictures = EvidencePictures(away, store, SHIPPED, span=3600, clock=lambda: now[0])
    assert pictures.take(case) is None  # the notice goes without one
    assert store.latest_picture(case.id) is None

    class Counting:
        asked = 0

        def custom_query_range(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            Counting.asked += 1
            return []

    pictures.prom = Counting()
    assert pictures.take(case) is None and Counting.asked == 0  # not asked again at once
    now[0] += 61  # a minute on, Prometheus is asked again
    assert pictures.take(case) is None and Counting.asked == 5  # asked; no series: no picture
