"""One NVML reading (exporter/nvml_reader.py), on the simulated driver with its injected
faults: a lost GPU, a missing library, PIDs a binding should never report, samples that
name another namespace's PIDs. An unknown value is None and a failure stays where it is."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.nvml import open_nvml
from exporter.nvml_reader import NvmlReader, NvmlReading, util_join, valid_pid
from exporter.sim.nvml import SNAPSHOT_TTL_SECONDS
from exporter.sim.state import load_faults, load_node, save_faults
from tests.support import GiB


def _fault(node: Path, **changes: Any) -> None:
    save_faults(node, dataclasses.replace(load_faults(node), **changes))
    time.sleep(SNAPSHOT_TTL_SECONDS)


def _read(node: Path) -> NvmlReading:
    return NvmlReader(open_nvml(node)).read()


def test_a_healthy_node_reads_every_gpu_with_its_identity(sim_node: Path) -> None:
    reading = _read(sim_node)
    assert reading.up and reading.failed_gpus == () and reading.driver_version
    uuids = [gpu.uuid for gpu in load_node(sim_node).gpus]
    assert [(g.index, g.uuid) for g in reading.gpus] == list(enumerate(uuids))
    assert all(g.memory_total == 80 * GiB and g.processes == () for g in reading.gpus)


def test_a_lost_gpu_is_failed_alone(sim_node: Path) -> None:
    _fault(sim_node, lost_gpus=(0,), ghost_pids=((1, 4242, GiB),))
    reading = _read(sim_node)
    assert reading.up and reading.failed_gpus == (0,)
    (other,) = reading.gpus
    assert other.index == 1 and [p.pid for p in other.processes] == [4242]


def test_a_missing_library_is_down_and_noticed_back_without_a_new_reader(sim_node: Path) -> None:
    _fault(sim_node, nvml_missing=True)
    reader = NvmlReader(open_nvml(sim_node))
    down = reader.read()
    assert not down.up and down.error and down.gpus == ()
    _fault(sim_node, nvml_missing=False)
    assert reader.read().up


def test_pids_no_binding_may_report_are_dropped_and_make_the_gpu_unknown(sim_node: Path) -> None:
    _fault(sim_node, ghost_pids=((0, 0, GiB), (0, 2**32 - 1, GiB), (0, 4242, GiB)))
    gpu = _read(sim_node).gpus[0]
    assert [p.pid for p in gpu.processes] == [4242]
    assert gpu.util_unknown_reason == "invalid_pid"
    assert all(p.sm_utilization is None for p in gpu.processes)  # unknown, never 0


def test_unsupported_per_process_utilisation_is_unknown_not_zero(sim_node: Path) -> None:
    _fault(sim_node, process_util_unsupported=(0,), ghost_pids=((0, 4242, 2 * GiB),))
    gpu = _read(sim_node).gpus[0]
    assert gpu.process_util_supported is False
    (process,) = gpu.processes
    assert process.memory_used == 2 * GiB and process.sm_utilization is None


@pytest.mark.parametrize(
    ("pid", "valid"), [(1, True), (4_194_303, True), (0, False), (2**32 - 1, False), ("7", False)]
)
def test_valid_pids_are_those_a_kernel_can_give(pid: object, valid: bool) -> None:
    assert valid_pid(pid) is valid


def test_a_busy_device_without_busy_listed_processes_is_unknown() -> None:
    assert util_join({10, 11}, {}, 0.0) == ""  # idle device, no samples: 0 % proven
    assert util_join({10, 11}, {10: 90}, 0.9) == ""
    assert util_join({10, 11}, {}, 0.9) == "device_busy_unattributed"
    assert util_join({10}, {10: 3}, 0.6) == "device_busy_unattributed"
    assert util_join({10}, {99: 90}, 0.9) == "pid_mismatch"
    assert util_join({10}, {}, None) == "device_util_unknown"
