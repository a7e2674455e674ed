"""Named scenarios for the exporter's collector, with real processes on a simulated node."""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from exporter import procfs
from exporter.sim.nvml import SNAPSHOT_TTL_SECONDS
from exporter.sim.state import load_faults, load_node, save_faults
from tests.helpers.scraper import Scraper
from tests.support import GiB, free_port, http_get, wait_until


def _fault(node: Path, **changes) -> None:
    save_faults(node, dataclasses.replace(load_faults(node), **changes))
    time.sleep(SNAPSHOT_TTL_SECONDS)


def test_normal_fleet(sim_node: Path, spawn_workload, tmp_path: Path) -> None:
    busy = spawn_workload("--name", "yolo", memory="6GiB", phases="busy")
    idle = spawn_workload("--module", "ipykernel_launcher", memory="3GiB", phases="idle")
    cpu = spawn_workload("--cpu", gpu=1, memory="2GiB", phases="idle")
    scraper = Scraper(sim_node)
    scraper.samples()
    time.sleep(1.0)
    assert scraper.value("gpu_exporter_nvml_up") == 1
    assert scraper.value("gpu_memory_total_bytes", gpu=0, uuid=scraper.uuids[0]) == 80 * GiB
    assert scraper.process("gpu_process_memory_used_bytes", busy.pid) == 6 * GiB
    assert scraper.process("gpu_process_memory_used_bytes", idle.pid) == 3 * GiB
    assert scraper.process("gpu_process_sm_utilization_ratio", busy.pid) > 0.8
    assert scraper.process("gpu_process_sm_utilization_ratio", idle.pid) == 0
    assert scraper.process("gpu_process_sm_utilization_ratio", cpu.pid, gpu=1) == 0
    started = scraper.process("gpu_process_start_time_seconds", busy.pid)
    assert started == pytest.approx(psutil.Process(busy.pid).create_time(), abs=0.02)
    info = scraper.info(idle.pid)
    assert info is not None
    assert info["command"] == "ipykernel_launcher" and info["node"] == "node-a"
    assert scraper.info(busy.pid)["command"] == "yolo"
    assert info["user"] and info["uid"] == str(psutil.Process(idle.pid).uids().real)
    # CPU-bound while GPU-idle: its CPU counter moves, the idle kernel's does not.
    before = {
        p: scraper.process("gpu_process_cpu_seconds_total", p.pid, g)
        for p, g in ((cpu, 1), (idle, 0))
    }
    time.sleep(1.5)
    after = {
        p: scraper.process("gpu_process_cpu_seconds_total", p.pid, g)
        for p, g in ((cpu, 1), (idle, 0))
    }
    assert after[cpu] - before[cpu] > 0.5
    assert after[idle] - before[idle] < 0.2


@pytest.mark.reliability(46)
def test_exited_process_is_gone_from_the_next_scrape(sim_node: Path, spawn_workload) -> None:
    workload = spawn_workload(phases="idle")
    scraper = Scraper(sim_node)
    assert scraper.process("gpu_process_memory_used_bytes", workload.pid) == 4 * GiB
    workload.send_signal(signal.SIGTERM)
    workload.wait(timeout=10)
    time.sleep(SNAPSHOT_TTL_SECONDS)
    remaining = [key for key in scraper.samples() if ("pid", str(workload.pid)) in key[1]]
    assert remaining == []


@pytest.mark.reliability(21)
def test_pid_listed_by_nvml_but_gone_from_proc(sim_node: Path, spawn_workload) -> None:
    real = spawn_workload(phases="idle")
    ghost = 4_000_000
    _fault(sim_node, ghost_pids=((0, ghost, GiB),))
    scraper = Scraper(sim_node)
    assert scraper.process("gpu_process_memory_used_bytes", ghost) == GiB
    for name in ("gpu_process_cpu_seconds_total", "gpu_process_start_time_seconds"):
        assert scraper.process(name, ghost) is None
    assert scraper.info(ghost) is None
    assert scraper.info(real.pid) is not None  # the rest of the scrape is intact


@pytest.mark.reliability(17)
def test_one_gpu_lost(sim_node: Path, spawn_workload) -> None:
    on_lost = spawn_workload(gpu=0, phases="idle")
    on_good = spawn_workload(gpu=1, phases="idle")
    _fault(sim_node, lost_gpus=(0,))
    scraper = Scraper(sim_node)
    assert scraper.value("gpu_exporter_nvml_up") == 1
    assert scraper.value("gpu_exporter_device_up", gpu=0) == 0
    assert scraper.value("gpu_exporter_device_up", gpu=1) == 1
    assert scraper.process("gpu_process_memory_used_bytes", on_lost.pid) is None
    assert scraper.process("gpu_process_memory_used_bytes", on_good.pid, gpu=1) == 4 * GiB


@pytest.mark.reliability(17)
def test_nvml_missing_reports_down_and_no_process_series(sim_node: Path, spawn_workload) -> None:
    spawn_workload(phases="idle")
    _fault(sim_node, nvml_missing=True)
    scraper = Scraper(sim_node)
    samples = scraper.samples()
    assert scraper.value("gpu_exporter_nvml_up") == 0
    assert not [name for name, _ in samples if name.startswith("gpu_process_")]
    # NVML coming back is noticed without a restart.
    _fault(sim_node, nvml_missing=False)
    assert scraper.value("gpu_exporter_nvml_up") == 1


@pytest.mark.reliability(16)
def test_process_utilization_unsupported_exports_no_util(sim_node: Path, spawn_workload) -> None:
    idle = spawn_workload(phases="idle")
    _fault(sim_node, process_util_unsupported=(0,))
    scraper = Scraper(sim_node)
    assert scraper.process("gpu_process_sm_utilization_ratio", idle.pid) is None  # unknown, not 0
    assert scraper.process("gpu_process_memory_used_bytes", idle.pid) == 4 * GiB
    labels = {"gpu": "0", "uuid": scraper.uuids[0]}
    assert scraper.value("gpu_exporter_process_utilization_supported", **labels) == 0


def test_children_cpu_is_counted_for_the_parent(sim_node: Path, spawn_workload) -> None:
    parent = spawn_workload("--children", "1", "--cpu", phases="idle")
    scraper = Scraper(sim_node)
    wait_until(lambda: psutil.Process(parent.pid).children())
    first = scraper.process("gpu_process_cpu_seconds_total", parent.pid)
    own_first = sum(psutil.Process(parent.pid).cpu_times()[:2])
    time.sleep(1.5)
    grown = scraper.process("gpu_process_cpu_seconds_total", parent.pid) - first
    own_grown = sum(psutil.Process(parent.pid).cpu_times()[:2]) - own_first
    assert grown > 0.5 and own_grown < 0.3


def test_log_and_heartbeat_timestamps(sim_node: Path, spawn_workload, tmp_path: Path) -> None:
    beats = tmp_path / "heartbeats"
    log = tmp_path / "train.log"
    busy = spawn_workload(
        "--log", str(log), "--heartbeat", "--heartbeat-dir", str(beats), phases="busy=2s,idle"
    )
    with open(tmp_path / "stdout.log", "w") as out:
        quiet = spawn_workload(phases="idle", stdout=out)
    scraper = Scraper(sim_node, heartbeat_dir=beats, log_globs=("*.log",))
    wait_until(lambda: scraper.process("gpu_process_heartbeat_timestamp_seconds", busy.pid))
    now = time.time()
    assert now - scraper.process("gpu_process_heartbeat_timestamp_seconds", busy.pid) < 3
    assert now - scraper.process("gpu_process_log_write_timestamp_seconds", busy.pid) < 3
    # stdout is a file the idle process never writes to: its mtime is the creation time
    stamp = scraper.process("gpu_process_log_write_timestamp_seconds", quiet.pid)
    assert stamp == pytest.approx((tmp_path / "stdout.log").stat().st_mtime)
    assert scraper.process("gpu_process_heartbeat_timestamp_seconds", quiet.pid) is None
    # After the busy phase the heartbeat stops moving: staleness is visible.
    time.sleep(3)
    frozen = scraper.process("gpu_process_heartbeat_timestamp_seconds", busy.pid)
    assert time.time() - frozen > 0.9


@pytest.mark.reliability(18)
def test_hanging_nvml_call_does_not_hang_the_scrape(sim_node: Path, spawn_workload) -> None:
    spawn_workload(phases="idle")
    scraper = Scraper(sim_node, nvml_timeout=0.5)
    assert scraper.value("gpu_exporter_nvml_up") == 1
    _fault(sim_node, hang_call="nvmlDeviceGetComputeRunningProcesses", hang_seconds=60)
    threads = threading.active_count()
    for _ in range(4):
        started = time.monotonic()
        assert scraper.value("gpu_exporter_nvml_up") == 0
        assert time.monotonic() - started < 1.5
    assert threading.active_count() <= threads + 1  # one stuck worker at most, no pile-up
    _fault(sim_node, hang_call="")
    wait_until(lambda: scraper.value("gpu_exporter_nvml_up") == 1, timeout=5)


@pytest.mark.reliability(15, 19)
def test_samples_naming_other_pids_make_every_process_of_that_gpu_unknown(
    sim_node: Path, spawn_workload
) -> None:
    busy = spawn_workload(memory="6GiB", phases="busy")
    other = spawn_workload(gpu=1, memory="2GiB", phases="busy")
    scraper = Scraper(sim_node)
    wait_until(
        lambda: (scraper.samples(), scraper.process("gpu_process_sm_utilization_ratio", busy.pid))[
            1
        ],
        5,
    )
    _fault(sim_node, util_pid_offsets=((0, 100000),))
    scraper.samples()
    assert scraper.process("gpu_process_sm_utilization_ratio", busy.pid) is None  # never 0
    assert (
        scraper.value("gpu_exporter_process_utilization_supported", gpu=0, uuid=scraper.uuids[0])
        == 0
    )
    assert (
        scraper.value(
            "gpu_exporter_process_utilization_unknown",
            gpu=0,
            uuid=scraper.uuids[0],
            reason="pid_mismatch",
        )
        == 1
    )
    # The other GPU's join still holds.
    assert (scraper.process("gpu_process_sm_utilization_ratio", other.pid, gpu=1) or 0) > 0.5


@pytest.mark.reliability(20)
def test_invalid_pids_from_the_binding_are_rejected(sim_node: Path, spawn_workload) -> None:
    idle = spawn_workload(memory="2GiB", phases="idle")
    _fault(sim_node, ghost_pids=((0, 0, 1 * GiB), (0, 2**32 - 1, 1 * GiB)))
    scraper = Scraper(sim_node)
    scraper.samples()
    for pid in (0, 2**32 - 1):
        assert scraper.process("gpu_process_memory_used_bytes", pid) is None
    assert scraper.process("gpu_process_memory_used_bytes", idle.pid) == 2 * GiB
    assert scraper.process("gpu_process_sm_utilization_ratio", idle.pid) is None
    assert (
        scraper.value(
            "gpu_exporter_process_utilization_unknown",
            gpu=0,
            uuid=scraper.uuids[0],
            reason="invalid_pid",
        )
        == 1
    )


@pytest.mark.reliability(42)
def test_a_moved_boot_time_leaves_every_process_labelled(
    sim_node: Path, spawn_workload, tmp_path: Path
) -> None:
    """Found by the hour of chaos: the host's wall clock moved a second, so did /proc/stat's
    btime, and the exporter, which had turned start ticks into a start time with the btime
    it read at its start, found every new process's start "a second off" from psutil's and
    took it for a reused PID: no gpu_process_info, no alert, for the rest of its life.
    Here the exporter's view of btime is an hour ahead of psutil's."""
    from tests.helpers.procview import stepped_proc

    w = spawn_workload(phases="idle")
    scraper = Scraper(sim_node, proc_root=stepped_proc(tmp_path))
    info = scraper.info(w.pid)
    assert info is not None and info["start_ticks"] == str(procfs.start_ticks(w.pid))
    started = scraper.process("gpu_process_start_time_seconds", w.pid)
    assert started is not None and abs(started - 3600 - psutil.Process(w.pid).create_time()) < 1


def test_info_carries_the_identity_the_actuator_checks(sim_node: Path, spawn_workload) -> None:
    from exporter import procfs

    busy = spawn_workload(memory="1GiB", phases="busy")
    scraper = Scraper(sim_node)
    info = scraper.info(busy.pid)
    stat = procfs.read_stat(busy.pid)
    assert info is not None and stat is not None
    assert info["start_ticks"] == str(stat.start_ticks)
    assert info["boot_id"] == procfs.boot_id()


@pytest.mark.reliability(18)
def test_with_the_default_timeout_a_scrape_during_a_hang_answers_within_2s(
    sim_node: Path, spawn_workload
) -> None:
    spawn_workload(phases="idle")
    scraper = Scraper(sim_node)  # the shipped nvml_timeout
    assert scraper.value("gpu_exporter_nvml_up") == 1
    _fault(sim_node, hang_call="nvmlDeviceGetComputeRunningProcesses", hang_seconds=60)
    started = time.monotonic()
    assert scraper.value("gpu_exporter_nvml_up") == 0
    assert time.monotonic() - started < 2.0
    _fault(sim_node, hang_call="")


def test_board_power_and_energy_as_the_card_draws_them(sim_node: Path, spawn_workload) -> None:
    """An empty card draws its lowest power; one holding an idle context more; a busy one
    more still, within its limit; the energy counter only goes up."""
    from exporter.sim.power import model_for

    model = model_for(load_node(sim_node).gpus[0].name)
    scraper = Scraper(sim_node)

    def power(gpu: int) -> float | None:
        return scraper.value("gpu_power_usage_watts", gpu=gpu, uuid=scraper.uuids[gpu])

    def energy(gpu: int) -> float | None:
        return scraper.value("gpu_energy_consumed_joules_total", gpu=gpu, uuid=scraper.uuids[gpu])

    scraper.samples()
    assert power(0) == model.empty_w and power(1) == model.empty_w
    spawn_workload(memory="3GiB", phases="idle")
    spawn_workload(gpu=1, memory="3GiB", phases="busy")
    time.sleep(SNAPSHOT_TTL_SECONDS)
    scraper.samples()
    first = energy(1)
    time.sleep(1.0)
    scraper.samples()
    assert power(0) == model.context_w  # idle: the context alone
    assert model.context_w < power(1) <= model.limit_w  # busy
    assert energy(1) - first >= model.context_w * 0.9  # about a second of its draw


def test_network_evidence_per_process_tree(sim_node: Path, spawn_workload) -> None:
    """The tree's sockets are read: a job that listens on nothing has no listener series and
    no activity, and is not unknown; a server's listeners are counted; with network
    evidence off, nothing is read."""
    job = spawn_workload(memory="2GiB", phases="idle")
    scraper = Scraper(sim_node)
    scraper.samples()
    uuid = scraper.uuids[0]
    labels = {"gpu": 0, "uuid": uuid, "pid": job.pid}
    assert scraper.value("gpu_process_listening_sockets", **labels, scope="loopback") is None
    assert scraper.process("gpu_process_network_last_activity_timestamp_seconds", job.pid) is None
    unknown = [k for k in scraper.samples() if k[0] == "gpu_exporter_process_network_unknown"]
    assert unknown == []
    port = free_port()
    server = spawn_workload("--serve", str(port), memory="2GiB", phases="idle")
    wait_until(lambda: http_get(f"http://127.0.0.1:{port}/health"))
    served = {"gpu": 0, "uuid": uuid, "pid": server.pid}
    listening = "gpu_process_listening_sockets"
    wait_until(lambda: scraper.samples() and scraper.value(listening, **served, scope="loopback"))
    assert scraper.value("gpu_process_listening_sockets", **served, scope="loopback") == 1
    assert scraper.value("gpu_process_listening_sockets", **served, scope="external") == 0
    off = Scraper(sim_node, network=False)
    off.samples()
    assert off.value("gpu_process_listening_sockets", **served, scope="loopback") is None
