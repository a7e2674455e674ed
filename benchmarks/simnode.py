"""A simulated node of real workload processes for the exporter benchmarks."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from measure import percentile

from exporter.sim.state import init_node, read_procs

__all__ = ["GiB", "percentile", "start_node"]

GiB = 1024**3
REPO = Path(__file__).resolve().parents[1]


def start_node(
    workdir: Path, gpus: int, per_gpu: int, idle: int, *, serve: bool = False
) -> list[subprocess.Popen]:
    """`workdir`/node with GPUS x PER_GPU workloads (busy, idle, loading in turn; their
    stdout on one shared log file, as batch jobs have) and IDLE unrelated processes; with
    `serve`, each workload also listens on a loopback port (`sim run --serve 0`), so every
    tree holds a socket and each scrape lists the kernel's TCP table.
    The caller kills the returned processes."""
    node = workdir / "node"
    init_node(node, gpus=gpus, memory_total=80 * GiB, name="NVIDIA H100 80GB HBM3")
    print(f"  starting {gpus * per_gpu} workload and {idle} idle processes ...", flush=True)
    children: list[subprocess.Popen] = [subprocess.Popen(["sleep", "100000"]) for _ in range(idle)]
    with open(workdir / "workloads.log", "w") as log:  # the children keep it open
        phases = ("busy", "idle", "load=1h,busy")
        for gpu in range(gpus):
            for i in range(per_gpu):
                children.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "exporter.cli",
                            "sim",
                            "run",
                            "--dir",
                            str(node),
                            "--gpu",
                            str(gpu),
                            "--memory",
                            "1GiB",
                            "--phases",
                            phases[i % 3],
                            "--tick",
                            "1",
                            *(["--serve", "0"] if serve else []),
                        ],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=REPO,
                    )
                )
    deadline = time.monotonic() + 300
    while len(read_procs(node)) < gpus * per_gpu:
        if time.monotonic() > deadline:
            for child in children:
                child.kill()
            raise RuntimeError("workloads did not all start")
        time.sleep(0.5)
    return children
