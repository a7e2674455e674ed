"""Where the exporter's memory goes under process churn: tracemalloc's allocation sites that
grew between two points of a churn, in one process (the collector and its text exposition,
on a simulated 8-GPU node), so a growth that benchmarks/churn_soak.py shows in RSS can be
named by file and line.

    python benchmarks/exporter_churn_memory.py [--scrapes 400] [--rate 10] [--live 64]

LIVE real processes (`sleep`) hold 1 GiB each on the simulated driver; before each scrape
RATE of them are retired (killed, freed on the driver) and as many start. The snapshot after
the first tenth of the scrapes (modules loaded, caches warm) is compared with the last.
A bounded cache shows as growth that stops; a leak grows with the scrapes. Run it twice with
different --scrapes to tell them apart.
"""

from __future__ import annotations

import argparse
import collections
import platform
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exporter import procfs  # noqa: E402
from exporter.collector import ExporterSettings, GpuCollector  # noqa: E402
from exporter.exposition import _cached_value  # noqa: E402
from exporter.identity import IdentityCache  # noqa: E402
from exporter.nvml import open_nvml  # noqa: E402
from exporter.nvml_reader import NvmlReader  # noqa: E402
from exporter.sim.state import ProcState, init_node, proc_path, write_proc  # noqa: E402

GiB = 1024**3
GPUS = 8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=400, help="scrapes in all (400)")
    parser.add_argument("--rate", type=int, default=10, help="processes replaced per scrape (10)")
    parser.add_argument("--live", type=int, default=64, help="GPU processes alive at once (64)")
    parser.add_argument("--top", type=int, default=8, help="allocation sites shown (8)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="exporter-churn-memory-") as work:
        node, heartbeats = Path(work) / "node", Path(work) / "heartbeats"
        heartbeats.mkdir()
        init_node(node, gpus=GPUS, memory_total=80 * GiB, name="NVIDIA H100 80GB HBM3")
        settings = ExporterSettings(
            node_name="churn", heartbeat_dir=str(heartbeats), log_globs=(), nvml_timeout=5.0
        )
        collector = GpuCollector(NvmlReader(open_nvml(node)), settings, IdentityCache(None))
        live: collections.deque[subprocess.Popen[bytes]] = collections.deque()
        started = 0

        def start() -> None:
            nonlocal started
            process = subprocess.Popen(["sleep", "100000"])
            ticks = procfs.start_ticks(process.pid)
            assert ticks is not None
            state = ProcState(process.pid, ticks, started % GPUS, GiB, 0, updated=time.time())
            write_proc(node, state)
            live.append(process)
            started += 1

        def retire() -> None:
            process = live.popleft()
            process.kill()
            process.wait()
            proc_path(node, process.pid).unlink(missing_ok=True)

        for _ in range(args.live):
            start()
        tracemalloc.start(1)
        warm = max(1, args.scrapes // 10)
        first = None
        try:
            for scrape in range(args.scrapes):
                for _ in range(args.rate):
                    retire()
                    start()
                collector.exposition()
                if scrape + 1 == warm:
                    first = tracemalloc.take_snapshot()
                if (scrape + 1) % max(1, args.scrapes // 10) == 0:
                    print(f"{scrape + 1} scrapes, {started} processes started", flush=True)
            last = tracemalloc.take_snapshot()
        finally:
            for process in live:
                process.kill()
                process.wait()
    assert first is not None
    print(
        f"\n{platform.machine()}, Python {platform.python_version()}; {args.scrapes} scrapes,"
        f" {started} processes started; value cache: {_cached_value.cache_info()}"
    )
    grown = [s for s in last.compare_to(first, "lineno") if s.size_diff > 0]
    total = sum(s.size_diff for s in grown)
    print(f"grown after the first {warm} scrapes: {total / 1024:.0f} KiB in all; the largest:")
    for stat in grown[: args.top]:
        print(f"  {stat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
