"""Exporter scrape cost on a simulated node of real processes, optionally side by side with
the exporter of another commit (interleaved: A B, B A, ...).

Builds a node of G GPUs x P processes (real `gpu-reclaimer sim run` processes), optionally
N unrelated idle processes on the host, starts `gpu-reclaimer exporter` on loopback (and the
other commit's, from a git worktree), scrapes each in turn as Prometheus does (its Accept
header, gzip) and reports per exporter: the exporter's own scrape time
(gpu_exporter_scrape_duration_seconds) and the client's, p50/p99, CPU seconds per scrape and
RSS; with --compare, the ratios.

    python benchmarks/exporter_scrape.py                          # 8x4 and 8x32
    python benchmarks/exporter_scrape.py --layout 8x32 --compare HEAD~3 --scrapes 100
    python benchmarks/exporter_scrape.py --layout 8x32 --idle-host 50 --idle-host 1000
    python benchmarks/exporter_scrape.py --layout 8x32 --heartbeats none --heartbeats every

`--heartbeats every` gives each workload a heartbeat file (the format exporter.heartbeat
writes, refreshed by this script), as on a node where every job uses the callback; `none`
leaves the heartbeat directory empty.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import free_port  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from scratch import scratch_dir  # noqa: E402
from simnode import GiB, percentile, start_node  # noqa: E402

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


@dataclass
class Exporter:
    label: str
    process: subprocess.Popen[bytes]
    url: str
    client: list[float] = field(default_factory=list)
    server: list[float] = field(default_factory=list)
    cpu: float = 0.0
    body_bytes: int = 0
    series: int = 0

    def scrape(self, session: requests.Session) -> None:
        proc = psutil.Process(self.process.pid)
        before = sum(proc.cpu_times()[:2])
        started = time.perf_counter()
        headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
        r = session.get(self.url, headers=headers, timeout=10, stream=True)
        raw = r.raw.read()
        self.client.append(time.perf_counter() - started)
        self.cpu += sum(proc.cpu_times()[:2]) - before
        body = gzip.decompress(raw) if r.headers.get("Content-Encoding") == "gzip" else raw
        self.body_bytes = len(raw)
        lines = body.decode().splitlines()
        self.series = sum(1 for line in lines if line and not line.startswith("#"))
        for line in lines:
            if line.startswith("gpu_exporter_scrape_duration_seconds "):
                self.server.append(float(line.split()[1]))


def start_exporter(label: str, node: Path | None, workdir: Path, pythonpath: Path) -> Exporter:
    """The exporter on the simulated node `node`, or on the real driver where it is None."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    sim = ["--sim-dir", str(node)] if node is not None else []
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter.cli",
            "exporter",
            "--listen",
            f"127.0.0.1:{port}",
            *sim,
            "--heartbeat-dir",
            str(workdir / "hb"),
        ],
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=pythonpath,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 60
    while True:
        try:
            requests.get(url, timeout=5).raise_for_status()
            return Exporter(label, process, url)
        except requests.RequestException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def write_heartbeats(directory: Path, pids: list[int]) -> None:
    """One heartbeat file per process, as exporter.heartbeat writes it (host PID namespace)."""
    now = time.time()
    for pid in pids:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        ticks = int(raw[raw.rindex(b")") + 2 :].split()[19])
        link = os.readlink(f"/proc/{pid}/ns/pid")
        namespace = int(link[link.index("[") + 1 : link.index("]")])
        record = {"pid": pid, "pid_namespace": namespace, "start_ticks": ticks, "timestamp": now}
        path = directory / f"{namespace}-{pid}.json"
        path.with_suffix(".tmp").write_text(json.dumps(record))
        path.with_suffix(".tmp").rename(path)


def run_layout(
    gpus: int,
    per_gpu: int,
    idle_host: int,
    scrapes: int,
    interval: float,
    compare: Path | None,
    heartbeats: bool = False,
    serve: bool = False,
) -> list[Exporter]:
    workdir = scratch_dir("gpu-reclaimer-bench-")
    node = workdir / "node"
    (workdir / "hb").mkdir()
    children: list[subprocess.Popen[bytes]] = []
    with ExitStack() as cleanup:
        cleanup.callback(lambda: [(c.send_signal(signal.SIGKILL), c.wait()) for c in children])
        children.extend(start_node(workdir, gpus, per_gpu, idle_host, serve=serve))
        workloads = [c.pid for c in children[idle_host:]]  # after the idle host processes
        if heartbeats:
            write_heartbeats(workdir / "hb", workloads)
        exporters = [start_exporter("this", node, workdir, REPO)]
        if compare is not None:
            exporters.append(start_exporter("compare", node, workdir, compare))
        children.extend(e.process for e in exporters)
        session = requests.Session()
        for _ in range(5):  # warm the identity caches
            for e in exporters:
                e.scrape(session)
        for e in exporters:
            e.client.clear(), e.server.clear()
            e.cpu = 0.0
        for i in range(scrapes):
            order = exporters if i % 2 == 0 else exporters[::-1]
            for e in order:
                e.scrape(session)
            if heartbeats and i % 10 == 0:
                write_heartbeats(workdir / "hb", workloads)  # jobs beat on
            time.sleep(interval)
        for e in exporters:
            e.cpu /= scrapes
            e.rss = psutil.Process(e.process.pid).memory_info().rss / 1e6  # type: ignore[attr-defined]
        return exporters


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", action="append", help="GPUSxPROCESSES (default 8x4, 8x32)")
    parser.add_argument(
        "--idle-host",
        type=int,
        action="append",
        help="unrelated idle processes on the host (repeatable; default 0)",
    )
    parser.add_argument(
        "--heartbeats",
        choices=("none", "every"),
        action="append",
        help="heartbeat files: none, or one per workload (repeatable; default none)",
    )
    parser.add_argument("--compare", help="a git revision to run side by side (a worktree)")
    parser.add_argument(
        "--serve",
        action="store_true",
        help="every workload listens on a loopback port (a socket in each tree: network "
        "evidence lists the kernel's TCP table at each scrape)",
    )
    parser.add_argument("--scrapes", type=int, default=120)
    parser.add_argument(
        "--interval",
        type=float,
        default=0.3,
        help="seconds between rounds (>0.2 so the simulated driver state is re-read every scrape)",
    )
    args = parser.parse_args()
    compare = None
    if args.compare:
        compare = scratch_dir("gpu-reclaimer-compare-") / "tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(compare), args.compare],
            check=True,
            capture_output=True,
        )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{psutil.virtual_memory().total / GiB:.0f} GiB, Python {platform.python_version()}"
    )
    print(
        "| layout | idle host procs | heartbeats | exporter | series | gzip body | scrape p50 "
        "| scrape p99 | client p50 | client p99 | CPU/scrape | RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    try:
        for layout in args.layout or ["8x4", "8x32"]:
            gpus, per_gpu = (int(x) for x in layout.split("x"))
            for idle, beats in itertools.product(
                args.idle_host or [0], args.heartbeats or ["none"]
            ):
                found = run_layout(
                    gpus,
                    per_gpu,
                    idle,
                    args.scrapes,
                    args.interval,
                    compare,
                    beats == "every",
                    serve=args.serve,
                )
                for e in found:
                    print(
                        f"| {layout} | {idle} | {beats} | {e.label} | {e.series} "
                        f"| {e.body_bytes / 1e3:.0f} KB "
                        f"| {1000 * statistics.median(e.server):.1f} ms "
                        f"| {1000 * percentile(e.server, 0.99):.1f} ms "
                        f"| {1000 * statistics.median(e.client):.1f} ms "
                        f"| {1000 * percentile(e.client, 0.99):.1f} ms "
                        f"| {1000 * e.cpu:.1f} ms | {e.rss:.0f} MB |",  # type: ignore[attr-defined]
                        flush=True,
                    )
                if len(found) == 2:
                    a, b = found
                    print(
                        f"|  |  |  | ratio this/compare |  |  "
                        f"| {statistics.median(a.server) / statistics.median(b.server):.2f} "
                        f"| {percentile(a.server, 0.99) / percentile(b.server, 0.99):.2f} "
                        f"| {statistics.median(a.client) / statistics.median(b.client):.2f} "
                        f"| {percentile(a.client, 0.99) / percentile(b.client, 0.99):.2f} "
                        f"| {a.cpu / b.cpu:.2f} |  |",
                        flush=True,
                    )
    finally:
        if compare is not None:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(compare)],
                check=False,
                capture_output=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
