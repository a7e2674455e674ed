"""What each component says about itself: build info with the running version, and the
serving process's own CPU, memory and descriptors, read from /proc; the same through the
exporter's own families and through a prometheus_client registry."""

from __future__ import annotations

import os
import platform
import resource

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter import __version__
from exporter.selfmetrics import SelfCollector, build_info, own_families


def test_build_info_names_the_running_version_and_python() -> None:
    family = build_info("gpu_exporter")
    assert family.name == "gpu_exporter_build_info" and family.kind == "gauge"
    assert family.samples == [((__version__, platform.python_version()), 1)]


def test_the_process_families_are_this_processes_own() -> None:
    families = {f.name: f for f in own_families("gpu_exporter")}
    fds = families["process_open_fds"].samples[0][1]
    assert 3 <= fds <= len(os.listdir("/proc/self/fd")) + 5
    limit = families["process_max_fds"].samples[0][1]
    assert limit == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    rss = families["process_resident_memory_bytes"].samples[0][1]
    assert 10 * 2**20 < rss < 4 * 2**30
    assert families["process_cpu_seconds"].kind == "counter"
    assert all(not name.endswith("_created") for name in families)


def test_a_registry_exposes_the_same_for_the_actuator_and_the_agent() -> None:
    registry = CollectorRegistry()
    registry.register(SelfCollector("gpu_reclaimer"))
    text = generate_latest(registry).decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"gpu_reclaimer_build_info", "process_open_fds", "process_cpu_seconds"} <= names
    assert f'version="{__version__}"' in text
