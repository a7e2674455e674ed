"""What one durable write costs on a volume: an fsync'd audit record, an unsynced one, and a
`synchronous=FULL` SQLite commit, through the actuator's own AuditLog and Store.

    python benchmarks/sync_cost.py [--dir DIR] [--writes 300] [--rounds 5]

Run it with `--dir` on the volume that holds `storage.database` and `storage.audit_log`:
every decision the actuator takes is one audit fsync and one commit before its side effect
(a node pass's decisions share them), so these figures say what batching saves there. The
kinds are interleaved round by round; each figure is the median over rounds of the mean
per write. CPU is the writing thread's own (user + system); wall includes the wait for
the disk.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actuator.audit import AuditLog  # noqa: E402
from actuator.audit_records import StepError  # noqa: E402
from actuator.store import open_store  # noqa: E402

RECORD = StepError(case=1, state="notified", error="x" * 600)  # about a decision's size


def _per_write(write: Callable[[], object], writes: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per write, the mean over `writes`."""
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    for _ in range(writes):
        write()
    return (
        (time.thread_time() - cpu0) / writes * 1000,
        (time.perf_counter() - wall0) / writes * 1000,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="a directory on the volume")
    parser.add_argument("--writes", type=int, default=300, help="writes per kind and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.dir is not None and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: not a directory")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="gpu-reclaimer-sync-") as where:
        audit = AuditLog(os.path.join(where, "audit.jsonl"))
        store = open_store(os.path.join(where, "state.db"))
        store.init()
        kinds: dict[str, Callable[[], object]] = {
            "audit record, fsync'd": lambda: audit.write(RECORD),
            "audit record, unsynced": lambda: audit.write(RECORD, sync=False),
            "SQLite commit (synchronous=FULL)": lambda: store.count("bench"),
        }
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for name, write in kinds.items():
                results[name].append(_per_write(write, args.writes))
            audit.flush()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}; "
        f"{args.rounds} rounds of {args.writes} writes each"
    )
    print("| per write | CPU | wall |")
    print("|---|---|---|")
    for name, runs in results.items():
        cpu = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        print(f"| {name} | {cpu:.3f} ms | {wall:.3f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
