"""Pictures: none (and no wait on Prometheus for a while) when Prometheus is away; kept
with their case and pruned with it on SQLite and PostgreSQL. The whole path (exporter,
Prometheus, mail, keep page in a browser) is tests/actuator/test_keep_browser.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from actuator.evidence.pictures import EvidencePictures, _span
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


def test_a_slow_prometheus_holds_a_notice_at_most_one_budget_for_all_queries(
    tmp_path: Path,
) -> None:
    """A Prometheus that answers each query just inside a per-query timeout would hold the
    reconciler's pass for every query of the picture; the budget is for the whole picture."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    asked: list[str] = []

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            time.sleep(1.0)
            body = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        prom = PrometheusConnect(url=url, timeout=1, retry=Retry(0))
        store = Store(tmp_path / "store.db")
        store.init()
        case = make_case(facts={"node": "n", "pid": 4242, "gpu_uuid": "GPU-0"})
        pictures = EvidencePictures(prom, store, SHIPPED, span=3600, budget=1.5)
        began = time.monotonic()
        assert pictures.take(case) is None
        took = time.monotonic() - began
    finally:
        server.shutdown()
        server.server_close()
    # Six queries at 1 s each would be 6 s; the budget stops the second after half a second.
    assert 1.4 <= took < 4.0, took
    assert len(asked) == 2, asked
    assert all("timeout=" in path for path in asked), asked  # Prometheus is told, too


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(30.0, "30 s"), (89.0, "89 s"), (90.0, "2 min"), (1800.0, "30 min"), (7200.0, "2.0 h")],
)
def test_the_title_never_claims_more_history_than_the_picture_has(
    seconds: float, said: str
) -> None:
    assert _span(seconds) == said
