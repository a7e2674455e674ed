"""Evidence pictures: what is asked (pure), asked of a real Prometheus holding a known
history, drawn (the picture's pixels), linked (signed, read-only), kept and pruned with
the case. The whole path (exporter -> Prometheus -> mail -> keep page in a browser) is
tests/actuator/test_keep_browser.py's."""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from actuator.evidence import chart
from actuator.evidence.fetch import Evidence, FetchError, PanelData, Series, fetch
from actuator.evidence.links import PictureLinkError, PictureLinks, PictureRef
from actuator.evidence.pictures import EvidencePictures
from actuator.evidence.queries import Subject, idle_query, panels, selector, step_for, window
from actuator.keeplinks import KeepLinks, link_key
from actuator.store import Store, open_store
from exporter.thresholds import SHIPPED, from_rules
from tests.helpers.cases import make_case
from tests.helpers.history import GiB, M, backfilled_history
from tests.helpers.prom import Server
from tests.support import REPO

KEY = link_key("token")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, int]]:
    with backfilled_history(tmp_path_factory.mktemp("history")) as found:
        yield found


def _connect(url: str, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    return PrometheusConnect(url=url, timeout=timeout, retry=Retry(0))


# -- what is asked -------------------------------------------------------------------------


def test_a_picture_selects_the_proven_gpu_and_pid_and_starts_with_the_process() -> None:
    hostile = Subject('GPU-1"} or up{x="', 42, start_time=1000.0)
    assert selector(hostile) == '{uuid="GPU-1\\"} or up{x=\\"", pid="42"}'
    queries = [p.query for p in panels(hostile, SHIPPED)]
    assert all(selector(hostile) in q for q in queries)
    # The rule's window and thresholds, read from the rules file as the actuator reads them.
    assert "[1m]" in queries[0] and [p.threshold for p in panels(hostile, SHIPPED)] == [
        SHIPPED.max_sm_util,
        None,
        SHIPPED.max_cpu_cores,
        0.0,
    ]
    assert window(hostile, now=5000.0, span=3 * 3600) == (1000.0, 5000.0)  # since its start
    assert window(hostile, now=20000.0, span=3600) == (16400.0, 20000.0)
    assert step_for(0, 3600) == 15.0 and step_for(0, 60) == 1.0


def test_the_window_comes_from_the_rules_file_the_thresholds_come_from() -> None:
    text = (REPO / "alert-rules" / "gpu-reclaimer.rules.yml").read_text()
    assert from_rules(text).sample_window == "1m" == SHIPPED.sample_window
    assert from_rules(text.replace("[1m]", "[4s]")).sample_window == "4s"


# -- asked of a real Prometheus ---------------------------------------------------------------


def test_a_process_idle_for_an_hour_reads_as_the_rule_saw_it(history) -> None:
    prom, start = history
    subject = Subject("GPU-0", 100, start_time=start - 86400)  # idle from minute 10 to 70
    begin, end = start, start + 120 * M
    evidence = fetch(
        _connect(prom.url), panels(subject, SHIPPED), idle_query(subject), begin, end, 60
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
        _connect(prom.url), panels(other, SHIPPED)[:1], idle_query(other), begin, end, 60
    ).panels
    assert set(busy.series[0].values) == {0.5}


def test_prometheus_away_or_answering_nonsense_is_a_fetch_error_never_a_picture(
    tmp_path: Path,
) -> None:
    from tests.support import free_port

    subject = Subject("GPU-0", 100, start_time=0)
    away = _connect(f"http://127.0.0.1:{free_port()}", timeout=1)
    with pytest.raises(FetchError):
        fetch(away, panels(subject, SHIPPED), idle_query(subject), 0, 3600, 60)

    class Nonsense:
        def custom_query_range(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return {"resultType": "vector"}

    with pytest.raises(FetchError, match="not a range result"):
        fetch(Nonsense(), panels(subject, SHIPPED), idle_query(subject), 0, 3600, 60)
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


# -- drawn ---------------------------------------------------------------------------------


def _pixels(png: bytes):  # type: ignore[no-untyped-def]
    from matplotlib.image import imread

    return imread(io.BytesIO(png), format="png")


def _has_colour(image, colour: str, least: float = 0.6) -> bool:  # type: ignore[no-untyped-def]
    """At least 50 pixels of `colour`, or of it blended over white by antialiasing (with
    at least `least` of it)."""
    import numpy as np
    from matplotlib.colors import to_rgb

    d = np.array(to_rgb(colour)) - 1.0
    off_white = image[:, :, :3].reshape(-1, 3) - 1.0
    a = off_white @ d / (d @ d)
    residual = np.linalg.norm(off_white - np.outer(a, d), axis=1)
    return bool(((a >= least) & (a <= 1.02) & (residual < 0.04)).sum() > 50)


def _evidence(idle: tuple[float, ...]) -> Evidence:
    subject = Subject("GPU-0", 7, 0)
    times = tuple(float(t) for t in range(0, 3600, 60))
    data = tuple(
        PanelData(p, (Series(times, tuple(0.0 for _ in times)),) if p.unit != "writes" else ())
        for p in panels(subject, SHIPPED)
    )
    return Evidence(0.0, 3600.0, 60.0, data, idle)


def test_the_picture_draws_the_thresholds_and_shades_where_the_rule_held() -> None:
    shaded = chart.render(_evidence(tuple(float(t) for t in range(1800, 3600, 60))), "PID 7")
    plain = chart.render(_evidence(()), "PID 7")
    assert shaded[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", shaded[16:24])  # the IHDR chunk
    assert (width, height) == (640, 600)
    image = _pixels(shaded)
    assert _has_colour(image, chart.LIMIT_COLOUR) and _has_colour(image, chart.LINE_COLOUR)
    # The idle colour, blended at alpha 0.5 over white, appears only where the rule held.
    from matplotlib.colors import to_rgb

    blended = "#" + "".join(f"{round(255 * (1 + c) / 2):02x}" for c in to_rgb(chart.IDLE_COLOUR))
    assert _has_colour(image, blended, 0.95)
    assert not _has_colour(_pixels(plain), blended, 0.95)


def test_text_in_a_picture_is_never_parsed_as_math() -> None:
    png = chart.render(_evidence(()), "PID 7 on $\\frac{a}{b}$ GPU 0")  # would fail as mathtext
    assert png[:4] == b"\x89PNG"


# -- linked, kept, pruned -----------------------------------------------------------------


def test_a_picture_link_shows_one_picture_and_is_no_keep_link() -> None:
    now = [1000.0]
    links = PictureLinks(KEY, "https://reclaimer.example.com/", ttl=3600, clock=lambda: now[0])
    url = links.url(PictureRef(3, 9))
    assert url.startswith("https://reclaimer.example.com/evidence/") and url.endswith(".png")
    token = url.rsplit("/", 1)[1].removesuffix(".png")
    assert links.verify(token) == PictureRef(3, 9)
    with pytest.raises(PictureLinkError, match="not valid"):
        links.verify(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1])
    keep = KeepLinks(KEY, "https://reclaimer.example.com").token(3)
    with pytest.raises(PictureLinkError, match="not valid"):
        links.verify(keep)  # a keep link's token is not a picture's
    now[0] += 3601
    with pytest.raises(PictureLinkError, match="expired"):
        links.verify(token)


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
