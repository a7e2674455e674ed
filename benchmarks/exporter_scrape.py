"""Exporter scrape cost on a simulated node of real processes.

Builds a node of G GPUs x P processes (real `gpu-reclaimer sim run` processes), starts
`gpu-reclaimer exporter` on loopback, scrapes it N times and reports scrape latency
p50/p99 (client side and the exporter's own gpu_exporter_scrape_duration_seconds), CPU
seconds per scrape and the exporter's RSS.

    python benchmarks/exporter_scrape.py                 # 8x4 and 8x32
    python benchmarks/exporter_scrape.py --layout 8x32 --scrapes 200
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import requests

from exporter.sim.state import init_node, read_procs

GiB = 1024**3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "exporter.cli", *args]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_layout(gpus: int, per_gpu: int, scrapes: int, interval: float) -> dict[str, float]:
    workdir = Path(tempfile.mkdtemp(prefix="gpu-reclaimer-bench-"))
    node = workdir / "node"
    init_node(node, gpus=gpus, memory_total=80 * GiB, name="NVIDIA H100 80GB HBM3")
    workloads: list[subprocess.Popen[bytes]] = []
    exporter = None
    try:
        print(f"  starting {gpus * per_gpu} workload processes ...", flush=True)
        # A shared log file behind stdout/stderr, as batch jobs have: log series for everyone.
        log = open(workdir / "workloads.log", "w")  # noqa: SIM115 - lives as long as they do
        phases = ("busy", "idle", "load=1h,busy")
        for gpu in range(gpus):
            for i in range(per_gpu):
                workloads.append(
                    subprocess.Popen(
                        command("sim", "run", "--dir", str(node), "--gpu", str(gpu),
                                "--memory", "1GiB", "--phases", phases[i % 3], "--tick", "1"),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )  # fmt: skip
        deadline = time.monotonic() + 300
        while len(read_procs(node)) < gpus * per_gpu:
            if time.monotonic() > deadline:
                raise RuntimeError("workloads did not all start")
            time.sleep(0.5)
        port = free_port()
        exporter = subprocess.Popen(
            command("exporter", "--listen", f"127.0.0.1:{port}", "--sim-dir", str(node),
                    "--heartbeat-dir", str(workdir / "hb")),
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}/metrics"
        while True:
            try:
                requests.get(url, timeout=5).raise_for_status()
                break
            except requests.RequestException:
                time.sleep(0.2)
        proc = psutil.Process(exporter.pid)
        for _ in range(5):  # warm the identity cache
            requests.get(url, timeout=10)
            time.sleep(interval)
        client, server = [], []
        cpu_before = sum(proc.cpu_times()[:2])
        for _ in range(scrapes):
            started = time.perf_counter()
            body = requests.get(url, timeout=10).text
            client.append(time.perf_counter() - started)
            for line in body.splitlines():
                if line.startswith("gpu_exporter_scrape_duration_seconds "):
                    server.append(float(line.split()[1]))
            time.sleep(interval)
        cpu = (sum(proc.cpu_times()[:2]) - cpu_before) / scrapes
        series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
        return {
            "processes": gpus * per_gpu,
            "series": series,
            "client_p50_ms": 1000 * statistics.median(client),
            "client_p99_ms": 1000 * percentile(client, 0.99),
            "scrape_p50_ms": 1000 * statistics.median(server),
            "scrape_p99_ms": 1000 * percentile(server, 0.99),
            "cpu_ms_per_scrape": 1000 * cpu,
            "rss_mb": proc.memory_info().rss / 1e6,
        }
    finally:
        for process in [*workloads, *([exporter] if exporter else [])]:
            process.send_signal(signal.SIGKILL)
        for process in [*workloads, *([exporter] if exporter else [])]:
            process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", action="append", help="GPUSxPROCESSES (default 8x4, 8x32)")
    parser.add_argument("--scrapes", type=int, default=120)
    parser.add_argument(
        "--interval", type=float, default=0.3, help="seconds between scrapes (>0.2 so the "
        "simulated driver state is re-read every scrape)",
    )  # fmt: skip
    args = parser.parse_args()
    layouts = args.layout or ["8x4", "8x32"]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{psutil.virtual_memory().total / GiB:.0f} GiB, Python {platform.python_version()}"
    )
    print(
        "| layout | processes | series | scrape p50 | scrape p99 | client p50 | client p99 "
        "| CPU/scrape | RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for layout in layouts:
        gpus, per_gpu = (int(x) for x in layout.split("x"))
        r = run_layout(gpus, per_gpu, args.scrapes, args.interval)
        print(
            f"| {layout} | {r['processes']:.0f} | {r['series']:.0f} "
            f"| {r['scrape_p50_ms']:.1f} ms | {r['scrape_p99_ms']:.1f} ms "
            f"| {r['client_p50_ms']:.1f} ms | {r['client_p99_ms']:.1f} ms "
            f"| {r['cpu_ms_per_scrape']:.1f} ms | {r['rss_mb']:.0f} MB |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
