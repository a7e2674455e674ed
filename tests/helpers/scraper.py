"""A collector on a simulated node, read like Prometheus would (exporter tests)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from exporter.collector import ExporterSettings, GpuCollector
from exporter.identity import IdentityCache
from exporter.nvml import open_nvml
from exporter.nvml_reader import NvmlReader
from exporter.sim.state import load_node


class Scraper:
    """A collector on a simulated node, read like Prometheus would."""

    def __init__(self, node: Path, **settings) -> None:
        options = {"node_name": "node-a", **settings}
        self.collector = GpuCollector(
            NvmlReader(open_nvml(node)), ExporterSettings(**options), IdentityCache()
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.uuids = {gpu.index: gpu.uuid for gpu in load_node(node).gpus}

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in self.registry.collect()
            for s in family.samples
        }

    def value(self, name: str, **labels: str | int) -> float | None:
        return self.registry.get_sample_value(name, {k: str(v) for k, v in labels.items()})

    def process(self, name: str, pid: int, gpu: int = 0) -> float | None:
        return self.value(name, gpu=gpu, uuid=self.uuids[gpu], pid=pid)

    def info(self, pid: int, gpu: int = 0) -> dict[str, str] | None:
        for family in self.registry.collect():
            for s in family.samples:
                if s.name == "gpu_process_info" and (s.labels["pid"], s.labels["gpu"]) == (
                    str(pid),
                    str(gpu),
                ):
                    return s.labels
        return None
