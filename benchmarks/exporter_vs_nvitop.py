"""This exporter side by side with nvitop-exporter on the same simulated node.

nvitop-exporter answers from the simulation through benchmarks/nvitop_sim/sitecustomize.py
(pynvml's driver entry points replaced before nvitop imports it). Both exporters run on
loopback; the script checks that both report the same set of GPU PIDs, then scrapes them in
turn (A B, B A, ...) once a second each, as Prometheus would, and reports client latency
p50/p99, CPU per collection (ours collects at each scrape; nvitop every --interval in the
background: its CPU over the run divided by its collections), RSS and the ratios.

    python benchmarks/exporter_vs_nvitop.py --install            # makes a throwaway venv
    python benchmarks/exporter_vs_nvitop.py --nvitop-venv DIR --layout 8x32 --scrapes 60
    python benchmarks/exporter_vs_nvitop.py --nvitop-venv DIR --heartbeats

`--heartbeats` gives every workload a heartbeat file, rewritten every 10 scrapes as jobs
beat on (ours reads them; nvitop-exporter has no such signal, so its side is unchanged).
`--serve` makes every workload listen on a loopback port, so every process tree holds a
socket and each of our collections reads the kernel's TCP table for network evidence (on by
default; nvitop-exporter has none). Server p99 is ours as it measures itself
(`gpu_exporter_scrape_duration_seconds`), without the client's transfer.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from exporter_scrape import PROMETHEUS_ACCEPT, start_exporter, write_heartbeats  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from simnode import GiB, percentile, start_node  # noqa: E402

from tests.support import free_port  # noqa: E402

NVITOP = "nvitop-exporter==1.7.2"


def make_venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    subprocess.run([str(where / "bin" / "pip"), "install", "--quiet", NVITOP], check=True)
    return where


def start_nvitop(venv: Path, node: Path | None, interval: float) -> tuple[subprocess.Popen, str]:
    """nvitop-exporter answering from the simulated node `node` (its pynvml replaced, see
    the module's docstring), or from the real driver where it is None."""
    port = free_port()
    env = dict(os.environ)
    if node is not None:
        env |= {
            "GPU_RECLAIMER_SIM_DIR": str(node),
            "GPU_RECLAIMER_REPO": str(REPO),
            "PYTHONPATH": str(REPO / "benchmarks" / "nvitop_sim"),
        }
    process = subprocess.Popen(
        [
            str(venv / "bin" / "nvitop-exporter"),
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(port),
            "--interval",
            str(interval),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(url, timeout=5).ok:
                return process, url
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("nvitop-exporter did not start")
        time.sleep(0.3)


def pids(text: str, pattern: str) -> set[int]:
    return {int(m) for m in re.findall(pattern, text)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvitop-venv", type=Path, help="a venv with nvitop-exporter")
    parser.add_argument("--install", action="store_true", help=f"make a venv with {NVITOP}")
    parser.add_argument("--layout", default="8x32")
    parser.add_argument("--scrapes", type=int, default=60)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument(
        "--heartbeats", action="store_true", help="a heartbeat file for every workload"
    )
    parser.add_argument(
        "--serve", action="store_true", help="every workload listens on a port (network evidence)"
    )
    args = parser.parse_args()
    if args.nvitop_venv is None and not args.install:
        parser.error("give --nvitop-venv DIR or --install")
    venv = args.nvitop_venv or make_venv(scratch_dir("nvitop-") / "venv")
    gpus, per_gpu = (int(x) for x in args.layout.split("x"))
    memory = psutil.virtual_memory().total / GiB
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {memory:.0f} GiB, "
        f"Python {platform.python_version()}, layout {args.layout}, "
        f"heartbeats {'every process' if args.heartbeats else 'none'}, "
        f"sockets {'in every tree' if args.serve else 'none'}",
        flush=True,
    )
    workdir = scratch_dir("gpu-reclaimer-vs-nvitop-")
    children = start_node(workdir, gpus, per_gpu, 0, serve=args.serve)
    workloads = [c.pid for c in children]
    node = workdir / "node"
    (workdir / "hb").mkdir()
    try:
        if args.heartbeats:
            write_heartbeats(workdir / "hb", workloads)
        ours = start_exporter("gpu-reclaimer", node, workdir, REPO)
        children.append(ours.process)
        nv_process, nv_url = start_nvitop(venv, node, args.interval)
        children.append(nv_process)
        time.sleep(3 * args.interval)  # nvitop's first collections
        session = requests.Session()
        headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
        ours_pids = pids(
            session.get(ours.url, timeout=10).text,
            r'gpu_process_memory_used_bytes\{[^}]*pid="(\d+)"',
        )
        nv_pids = pids(session.get(nv_url, timeout=10).text, r'process_info_info\{[^}]*pid="(\d+)"')
        assert ours_pids == nv_pids and len(ours_pids) == gpus * per_gpu, (
            f"the exporters disagree: {len(ours_pids)} vs {len(nv_pids)} PIDs"
        )
        print(f"both report the same {len(ours_pids)} GPU PIDs", flush=True)
        nv = psutil.Process(nv_process.pid)
        our_proc = psutil.Process(ours.process.pid)
        nv_cpu0, our_cpu0, t0 = sum(nv.cpu_times()[:2]), sum(our_proc.cpu_times()[:2]), time.time()
        latency: dict[str, list[float]] = {"ours": [], "nvitop": []}
        server: list[float] = []
        for i in range(args.scrapes):
            order = [("ours", ours.url), ("nvitop", nv_url)]
            for name, url in order if i % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                answer = session.get(url, headers=headers, timeout=10)
                answer.raise_for_status()
                latency[name].append(time.perf_counter() - started)
                if name == "ours":
                    took = re.search(
                        r"^gpu_exporter_scrape_duration_seconds (\S+)$", answer.text, re.M
                    )
                    server.append(float(took.group(1)) if took else float("nan"))
            if args.heartbeats and i % 10 == 0:
                write_heartbeats(workdir / "hb", workloads)  # jobs beat on
            time.sleep(args.interval)
        elapsed = time.time() - t0
        nv_cpu = (sum(nv.cpu_times()[:2]) - nv_cpu0) / (elapsed / args.interval)
        our_cpu = (sum(our_proc.cpu_times()[:2]) - our_cpu0) / args.scrapes
        rss = {"ours": our_proc.memory_info().rss / 1e6, "nvitop": nv.memory_info().rss / 1e6}
    finally:
        for child in children:
            child.send_signal(signal.SIGKILL)
        for child in children:
            child.wait()
    print("| exporter | client p50 | client p99 | CPU per collection | RSS |")
    print("|---|---|---|---|---|")
    for name, cpu in (("ours", our_cpu), ("nvitop", nv_cpu)):
        print(
            f"| {name} | {1000 * statistics.median(latency[name]):.1f} ms "
            f"| {1000 * percentile(latency[name], 0.99):.1f} ms | {1000 * cpu:.1f} ms "
            f"| {rss[name]:.0f} MB |"
        )
    print(
        f"| ours, server p50 / p99 | {1000 * statistics.median(server):.1f} ms "
        f"| {1000 * percentile(server, 0.99):.1f} ms | | |"
    )
    print(
        f"| ratio ours/nvitop "
        f"| {statistics.median(latency['ours']) / statistics.median(latency['nvitop']):.2f} "
        f"| {percentile(latency['ours'], 0.99) / percentile(latency['nvitop'], 0.99):.2f} "
        f"| {our_cpu / nv_cpu:.2f} | {rss['ours'] / rss['nvitop']:.2f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
