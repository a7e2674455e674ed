"""CPU per live re-check when a tick re-checks many cases on one node, by where the process
tree comes from: a whole-host /proc pass per re-check, one pass shared by the tick (where
the kernel keeps no lists of children), or the kernel's lists of children (the default),
interleaved.

    python benchmarks/recheck_pass.py [--targets 200] [--threads 1] [--others 0] [--rounds 5]

Starts TARGETS processes, each with two children (a training script and its DataLoader
workers) and THREADS threads each (PyTorch runs dozens: the kernel lists a process's
children per thread, so that way reads one file per thread), then, per round, re-checks
every target once in a row as a reconciler tick does. OTHERS more processes (`sleep`) stand
for the rest of a busy host, which a whole-host pass reads too. NVML is left out (an empty
reading), so the figures are the /proc side of a re-check only.
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
    "import subprocess, sys, threading, time\n"
    "threads = int(sys.argv[1])\n"
    "idle = 'import sys, threading, time\\n"
    "[threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()"
    " for _ in range(int(sys.argv[1]) - 1)]\\ntime.sleep(3600)'\n"
    "kids = [subprocess.Popen([sys.executable, '-c', idle, str(threads)]) for _ in range(2)]\n"
    "[threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()"
    " for _ in range(threads - 1)]\n"
    "time.sleep(3600)\n"
)
WAYS = (  # label, table_max_age, kernel_lists
    ("a /proc pass per re-check", 0.0, False),
    ("one /proc pass per tick", 0.1, False),
    ("the kernel's lists of children", 0.1, True),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="threads per process")
    parser.add_argument("--others", type=int, default=0, help="other processes on the host")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    others = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.others)]
    print(
        f"starting {args.targets} targets with 2 children each, {args.threads} thread(s) "
        "per process ...",
        flush=True,
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", FAMILY, str(args.threads)])
        for _ in range(args.targets)
    ]
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
        results: dict[str, list[float]] = {label: [] for label, _, _ in WAYS}
        for _ in range(args.rounds):
            for label, age, kernel_lists in WAYS:
                check = Inspector(
                    protection,
                    lambda _: NvmlReading(up=True),
                    Evidence(),
                    nvml_timeout=1.0,
                    table_max_age=age,
                    kernel_lists=kernel_lists,
                )
                started = time.process_time()
                for target in targets:
                    live = check.inspect(target)
                    assert len(live.members) == 3, live
                results[label].append((time.process_time() - started) / len(targets))
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}; {host} processes on the host; {args.threads} "
            "thread(s) per process"
        )
        print("| the tree from | CPU per re-check (median of rounds) | / per re-check pass |")
        print("|---|---|---|")
        base = statistics.median(results[WAYS[0][0]])
        for label, values in results.items():
            median = statistics.median(values)
            print(f"| {label} | {1000 * median:.2f} ms | {median / base:.2f}x |")
    finally:
        for p in others:
            p.kill()
            p.wait()
        for p in procs:
            subprocess.run(["pkill", "-KILL", "-P", str(p.pid)], check=False)
            p.kill()
            p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
