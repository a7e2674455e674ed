"""The simulated node's files: written whole or not at all, readable by every user; a node
round-trips; a missing node says how to make one; a torn or foreign faults file is a
healthy node; process files that vanish or are half-written are skipped, and the cache
re-parses only what changed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from exporter.sim.state import (
    PROCS_DIR,
    Faults,
    ProcFileCache,
    ProcState,
    init_node,
    load_faults,
    load_node,
    proc_path,
    read_procs,
    save_faults,
    write_proc,
)


def test_a_node_round_trips_and_its_files_are_readable_by_all(tmp_path: Path) -> None:
    node = init_node(tmp_path, gpus=2, memory_total=80 * 2**30, name="NVIDIA H100 80GB HBM3")
    assert load_node(tmp_path) == node
    assert len({g.uuid for g in node.gpus}) == 2 and [g.index for g in node.gpus] == [0, 1]
    assert stat.S_IMODE((tmp_path / "node.json").stat().st_mode) == 0o644
    assert load_faults(tmp_path) == Faults()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_bad_nodes_are_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one GPU"):
        init_node(tmp_path, gpus=0, memory_total=1, name="x")
    with pytest.raises(FileNotFoundError, match="gpu-reclaimer sim init"):
        load_node(tmp_path / "nowhere")


def test_faults_round_trip_and_a_torn_file_is_a_healthy_node(tmp_path: Path) -> None:
    faults = Faults(lost_gpus=(1,), hang_call="nvmlDeviceGetUtilizationRates", hang_seconds=2.0)
    save_faults(tmp_path, faults)
    assert load_faults(tmp_path) == faults
    (tmp_path / "faults.json").write_text('{"lost_gpus": [1')
    assert load_faults(tmp_path) == Faults()


def test_unreadable_process_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / PROCS_DIR).mkdir()
    write_proc(tmp_path, ProcState(pid=11, start_ticks=5, gpu=0, memory_used=2**30, sm_util=0))
    (tmp_path / PROCS_DIR / "12.json").write_text('{"pid": 12, "start_')  # half-written
    (tmp_path / PROCS_DIR / "13.json").write_text('{"pid": 13, "other": 1}')  # foreign
    (tmp_path / PROCS_DIR / ".tmp-x.json").write_text("{}")
    assert [p.pid for p in read_procs(tmp_path)] == [11]
    assert [p.pid for p in ProcFileCache(tmp_path).read()] == [11]
    assert read_procs(tmp_path / "none") == [] and ProcFileCache(tmp_path / "none").read() == []


def test_the_cache_reparses_only_changed_files(tmp_path: Path) -> None:
    (tmp_path / PROCS_DIR).mkdir()
    write_proc(tmp_path, ProcState(pid=11, start_ticks=5, gpu=0, memory_used=1, sm_util=0))
    write_proc(tmp_path, ProcState(pid=12, start_ticks=6, gpu=1, memory_used=1, sm_util=0))
    cache = ProcFileCache(tmp_path)
    first = {p.pid: p for p in cache.read()}
    write_proc(tmp_path, ProcState(pid=12, start_ticks=6, gpu=1, memory_used=2, sm_util=90))
    os.utime(proc_path(tmp_path, 12), ns=(1, 10**18))  # a new mtime, whatever the clock
    second = {p.pid: p for p in cache.read()}
    assert second[11] is first[11]  # unchanged: not parsed again
    assert second[12].sm_util == 90
    proc_path(tmp_path, 11).unlink()  # the process exited
    assert [p.pid for p in cache.read()] == [12]
