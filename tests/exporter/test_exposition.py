"""The exporter's own exposition (exporter/exposition.py) against prometheus_client: byte
for byte the same text and OpenMetrics for the same families, parsed back to the same
samples, clean under promtool, and served with the right negotiation and gzip."""

from __future__ import annotations

import gzip
import math
import subprocess
from pathlib import Path

import pytest
import requests
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from exporter.collector import ExporterSettings, GpuCollector
from exporter.exposition import Exposition, Family
from exporter.identity import IdentityCache
from exporter.nvml import open_nvml
from exporter.nvml_reader import NvmlReader
from exporter.web import build_app, serve
from tests.helpers.prom import require_binary
from tests.support import wait_until


class _Fixed(Collector):
    def __init__(self, families: list[Family]) -> None:
        self.families = families

    def collect(self):  # type: ignore[no-untyped-def]
        return [f.to_metric() for f in self.families]


def _library(families: list[Family], *, openmetrics: bool = False) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return openmetrics_latest(registry) if openmetrics else generate_latest(registry)


def _awkward_families() -> list[Family]:
    info = Family(
        "x_info", "gauge", 'Identity "quoted", back\\slash\nnewline.', ("zeta", "alpha", "pid")
    )
    info.add(('a"b', "c\\d", "1"), 1)
    info.add(("line\nbreak", "用户", "2"), 1)
    info.add(("", "", "3"), 1)
    cpu = Family("x_cpu_seconds", "counter", "CPU.", ("pid",))
    for value in (0, 0.1, 12.5, 1.7964e9, 123456789.0, 2**53, 1e-7):
        cpu.add((str(value),), value)
    odd = Family("x_odd", "gauge", "Odd values.", ("v",))
    for value in (math.inf, -math.inf, math.nan, -0.0, -3.25):
        odd.add((repr(value),), value)
    empty = Family("x_empty", "gauge", "No samples.", ("gpu",))
    bare = Family("x_bare", "gauge", "No labels.")
    bare.add((), 7)
    return [info, cpu, odd, empty, bare]


@pytest.mark.parametrize("openmetrics", [False, True])
def test_awkward_families_render_exactly_as_the_library(openmetrics: bool) -> None:
    families = _awkward_families()
    expo = Exposition()
    first = expo.render(families, openmetrics=openmetrics)
    assert first == _library(families, openmetrics=openmetrics)
    assert expo.render(families, openmetrics=openmetrics) == first  # from the caches


@pytest.mark.parametrize("openmetrics", [False, True])
def test_new_values_of_kept_series_render_exactly_as_the_library(openmetrics: bool) -> None:
    # A series whose value moved keeps its label text from the last render: every value of
    # every awkward series changed (and back) must still give the library's bytes.
    families = _awkward_families()
    expo = Exposition()
    expo.render(families, openmetrics=openmetrics)
    for step in (2.5, -1.0, 0.0):
        moved = _awkward_families()
        for family in moved:
            family.samples = [(values, value * step + 1) for values, value in family.samples]
        assert expo.render(moved, openmetrics=openmetrics) == _library(
            moved, openmetrics=openmetrics
        )
    assert expo.render(families, openmetrics=openmetrics) == _library(
        families, openmetrics=openmetrics
    )


@pytest.mark.reliability(46)
def test_label_text_of_ended_series_is_dropped() -> None:
    expo = Exposition()
    family = Family("x", "gauge", "x", ("pid",))
    family.add(("1",), 1)
    expo.render([family])
    family.samples = [(("2",), 1)]
    assert b'pid="1"' not in expo.render([family])
    assert list(expo._lines["x"]) == [("2",)]


def _scrape_collector(sim_node: Path) -> GpuCollector:
    return GpuCollector(
        NvmlReader(open_nvml(sim_node)), ExporterSettings(node_name='node "a"'), IdentityCache()
    )


def test_a_real_scrape_equals_the_library_and_parses_back(sim_node: Path, spawn_workload) -> None:
    for phases in ("busy", "idle", "load=1h,busy"):
        spawn_workload("--children", "1", phases=phases)
    collector = _scrape_collector(sim_node)
    wait_until(lambda: b"gpu_process_info{" in collector.exposition(), timeout=20)
    families = collector.families()
    for openmetrics in (False, True):
        ours = collector._exposition.render(families, openmetrics=openmetrics)
        assert ours == _library(families, openmetrics=openmetrics)
    ours = collector._exposition.render(families)
    parsed = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for fam in text_string_to_metric_families(ours.decode())
        for s in fam.samples
        if not math.isnan(s.value)
    }
    direct = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for fam in families
        for s in fam.to_metric().samples
        if not math.isnan(s.value)
    }
    assert parsed == direct and len(parsed) > 20


def test_promtool_finds_the_exposition_clean(sim_node: Path, spawn_workload, tmp_path) -> None:
    spawn_workload(phases="busy")
    collector = _scrape_collector(sim_node)
    wait_until(lambda: b"gpu_process_info{" in collector.exposition(), timeout=20)
    body = collector.exposition()
    done = subprocess.run(
        [require_binary("promtool"), "check", "metrics"],
        input=body,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr + done.stdout


def test_negotiation_and_gzip_over_http(sim_node: Path) -> None:
    collector = _scrape_collector(sim_node)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server = serve(build_app(registry, "n", "sim", collector.exposition, 1), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    try:
        prometheus_accept = (
            "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
            "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
        )
        om = requests.get(url, headers={"Accept": prometheus_accept}, timeout=5)
        assert om.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        assert om.content.endswith(b"# EOF\n") and om.headers.get("Content-Encoding") == "gzip"
        plain = requests.get(url, headers={"Accept-Encoding": "identity"}, timeout=5)
        assert plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert "Content-Encoding" not in plain.headers and b"# EOF" not in plain.content
        raw = requests.get(url, headers={"Accept-Encoding": "gzip"}, timeout=5, stream=True)
        body = raw.raw.read()
        assert raw.headers["Content-Encoding"] == "gzip" and gzip.decompress(body).startswith(
            b"# HELP"
        )
        only = requests.get(url + "?name[]=gpu_exporter_nvml_up", timeout=5)
        assert b"gpu_exporter_nvml_up 1.0" in only.content and b"gpu_info" not in only.content
    finally:
        server.shutdown()
