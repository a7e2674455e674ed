"""What every exporter says about itself, the way Prometheus' own exporters do: a
`<prefix>_build_info` gauge (version, Python) and the `process_*` metrics of the serving
process (prometheus_client's ProcessCollector: CPU, memory, open and maximum file
descriptors, start time). The exporter, the actuator and the agent each export them."""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.exposition import Family, Kind

_process = ProcessCollector(registry=None)
# The text format generate_latest() writes, said once (a mimetype with a charset of its own
# would have the web framework add a second one).
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


def build_info(prefix: str) -> Family:
    family = Family(
        f"{prefix}_build_info",
        "gauge",
        "1, labelled with the running version and Python.",
        ("version", "python_version"),
    )
    family.add((__version__, platform.python_version()), 1)
    return family


def process_families() -> list[Family]:
    """The serving process's own metrics as families (empty where /proc is not there)."""
    out = []
    for metric in _process.collect():
        kind: Kind = "counter" if metric.type == "counter" else "gauge"
        family = Family(metric.name, kind, metric.documentation)
        for sample in metric.samples:
            if sample.name.endswith(("_created",)):
                continue
            family.add((), sample.value)
        out.append(family)
    return out


def own_families(prefix: str) -> list[Family]:
    return [build_info(prefix), *process_families()]


class SelfCollector(Collector):
    """The same, for a prometheus_client registry (the actuator's and the agent's)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            f"{self.prefix}_build_info",
            "1, labelled with the running version and Python.",
            labels=["version", "python_version"],
        )
        info.add_metric([__version__, platform.python_version()], 1)
        yield info
        yield from _process.collect()
