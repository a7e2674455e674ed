"""The exporter's scrape against its floor, in-process, on a simulated node of real
processes (interleaved rounds; medians, p99 and ratios).

Each round times, in turn:

- nvml:  one NVML reading alone (here the simulation, which stands in for the driver: its
         cost is reported, not ours to hide),
- ours:  a whole scrape as /metrics serves it (collector + exposition + gzip level 1),
- floor: the same facts read plainly with no metric code: the NVML reading, the /proc
         listing, the stat of every GPU process and its descendants, their stdout/stderr
         and log mtimes, the heartbeat files, and gzip of an already rendered body.

    python benchmarks/exporter_floor.py --layout 8x32 --rounds 100
    python benchmarks/exporter_floor.py --layout 8x32 --idle-host 50 --idle-host 1000
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import signal
import statistics
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exporter import procfs  # noqa: E402
from exporter.collector import ExporterSettings, GpuCollector  # noqa: E402
from exporter.heartbeat_reader import ProcessRef, read_heartbeats  # noqa: E402
from exporter.identity import IdentityCache  # noqa: E402
from exporter.logactivity import log_write_timestamp  # noqa: E402
from exporter.nvml import open_nvml  # noqa: E402
from exporter.nvml_reader import NvmlReader  # noqa: E402
from exporter.proctree import HostProcesses  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from scratch import scratch_dir  # noqa: E402
from simnode import GiB, percentile, start_node  # noqa: E402


def measure(workdir: Path, rounds: int, interval: float) -> dict[str, list[float]]:
    node, beats = workdir / "node", workdir / "hb"
    reader = NvmlReader(open_nvml(node))
    collector = GpuCollector(
        reader, ExporterSettings("bench", heartbeat_dir=beats), IdentityCache()
    )
    host = HostProcesses()
    body = b""

    def ours() -> None:
        nonlocal body
        body = collector.exposition(openmetrics=True)
        gzip.compress(body, compresslevel=1)

    def floor() -> None:
        reading = reader.read()
        host.refresh()
        pids = {p.pid for gpu in reading.gpus for p in gpu.processes}
        for pid in pids:
            procfs.read_stat(pid)
            for child in host.descendants(pid):
                procfs.read_stat(child)
            log_write_timestamp(pid, ())
        read_heartbeats(beats, [ProcessRef(pid) for pid in pids])
        gzip.compress(body, compresslevel=1)

    steps = {"nvml": reader.read, "ours": ours, "floor": floor}
    for step in steps.values():  # warm caches
        for _ in range(3):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    cpu: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            c, t = time.process_time(), time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
        time.sleep(interval)
    times.update({f"cpu_{k}": v for k, v in cpu.items()})
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", default="8x32", help="GPUSxPROCESSES (default 8x32)")
    parser.add_argument("--idle-host", type=int, action="append", help="unrelated processes")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.3)
    args = parser.parse_args()
    gpus, per_gpu = (int(x) for x in args.layout.split("x"))
    memory = psutil.virtual_memory().total / GiB
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {memory:.0f} GiB, "
        f"Python {platform.python_version()}"
    )
    print(
        "| layout | idle host procs | nvml p50 | ours p50 / p99 | floor p50 / p99 | ours / floor "
        "| ours - nvml / floor - nvml | CPU ours / floor |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for idle in args.idle_host or [0]:
        workdir = scratch_dir("gpu-reclaimer-floor-")
        children = start_node(workdir, gpus, per_gpu, idle)
        try:
            t = measure(workdir, args.rounds, args.interval)
        finally:
            for child in children:
                child.send_signal(signal.SIGKILL)
            for child in children:
                child.wait()
        med = {k: statistics.median(v) * 1000 for k, v in t.items()}
        p99 = {k: percentile(v, 0.99) * 1000 for k, v in t.items()}
        print(
            f"| {args.layout} | {idle} | {med['nvml']:.1f} ms "
            f"| {med['ours']:.1f} / {p99['ours']:.1f} ms | {med['floor']:.1f} / "
            f"{p99['floor']:.1f} ms | {med['ours'] / med['floor']:.2f} "
            f"| {(med['ours'] - med['nvml']) / (med['floor'] - med['nvml']):.2f} "
            f"| {med['cpu_ours']:.1f} / {med['cpu_floor']:.1f} ms |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
