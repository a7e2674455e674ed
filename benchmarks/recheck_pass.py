"""CPU per live re-check when a tick re-checks many cases on one node: one whole-host /proc
pass per re-check (the actuator before) against one shared by the tick (now), interleaved.

    python benchmarks/recheck_pass.py [--targets 200] [--rounds 5]

Starts TARGETS processes, each with two children (a training script and its DataLoader
workers), then, per round, re-checks every target once in a row as a reconciler tick does,
with `table_max_age` 0 (a /proc pass per re-check) and 0.1 s (one pass per tick). NVML is
left out (an empty reading), so the figures are the /proc side of a re-check only.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actuator.live import Evidence, Inspector  # noqa: E402
from actuator.models import Target  # noqa: E402
from actuator.policy import Protect  # noqa: E402
from actuator.protect import Protection  # noqa: E402
from exporter import procfs  # noqa: E402
from exporter.nvml_reader import NvmlReading  # noqa: E402

FAMILY = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])"
    " for _ in range(2)]\n"
    "time.sleep(3600)\n"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"starting {args.targets} targets with 2 children each ...", flush=True)
    procs = [subprocess.Popen([sys.executable, "-c", FAMILY]) for _ in range(args.targets)]
    try:
        time.sleep(3 + args.targets / 50)  # their children started
        boot = procfs.boot_id()
        targets = []
        for p in procs:
            stat = procfs.read_stat(p.pid)
            assert stat is not None
            targets.append(Target("bench", p.pid, stat.start_ticks, boot, "GPU-0", 0.0))
        host = sum(1 for name in os.listdir("/proc") if name.isdigit())
        protection = Protection(Protect(protect_root=False, protected_uid_below=0))
        results: dict[str, list[float]] = {"per re-check": [], "per tick": []}
        for _ in range(args.rounds):
            for label, age in (("per re-check", 0.0), ("per tick", 0.1)):
                check = Inspector(
                    protection,
                    lambda _: NvmlReading(up=True),
                    Evidence(),
                    nvml_timeout=1.0,
                    table_max_age=age,
                )
                started = time.process_time()
                for target in targets:
                    live = check.inspect(target)
                    assert len(live.members) == 3, live
                results[label].append((time.process_time() - started) / len(targets))
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}; {host} processes on the host"
        )
        print("| /proc pass | CPU per re-check (median of rounds) |")
        print("|---|---|")
        for label, values in results.items():
            print(f"| {label} | {1000 * statistics.median(values):.2f} ms |")
        before, after = (statistics.median(v) for v in results.values())
        print(f"ratio per tick / per re-check: {after / before:.2f}")
    finally:
        for p in procs:
            subprocess.run(["pkill", "-KILL", "-P", str(p.pid)], check=False)
            p.kill()
            p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
