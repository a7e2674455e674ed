"""CPU per live case of the read every reconciler pass makes of every live case
(`store.live_cases()`), on SQLite, with cases shaped like the ones an idle alert opens.

    python benchmarks/live_cases.py [--cases 200] [--passes 200] [--rounds 5] [--changed 0.05]

Each pass the reconciler reads every live case, whether it has a step due or is only
waiting out its grace (`reconciler.interval`, 0.5 s by default), so with a grace of minutes
this read is most of what a quiet pass costs. Each round makes PASSES reads of CASES live
cases; before each read a CHANGED share of them is written (a sample saved, as a pass
saves the samples of the cases it re-checked). It reports CPU per case per read (the
calling thread's, `time.thread_time`): medians of rounds. Run it in two checkouts to
compare them (`PYTHONPATH=<other checkout> python benchmarks/live_cases.py`).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # a checkout named by PYTHONPATH comes first

from actuator.models import Case, Member, State  # noqa: E402
from actuator.policy import Facts, Policy, resolve  # noqa: E402
from actuator.store import open_store  # noqa: E402
from actuator.store.cases import insert_case  # noqa: E402

T0 = 1_800_000_000.0


def idle_case(i: int) -> Case:
    """A case as an idle alert opens it, after its first re-check (policy, facts, tree)."""
    pid = 10_000 + i
    labels = {
        "alertname": "GpuProcessIdle",
        "instance": "gpu-node-1:9838",
        "job": "gpu-exporter",
        "node": "gpu-node-1",
        "gpu": str(i % 8),
        "uuid": f"GPU-6248c547-0000-0000-0000-{i % 8:012d}",
        "pid": str(pid),
        "start_time": f"{T0 - 3600:.2f}",
        "start_ticks": str(91_234_567 + i),
        "boot_id": "0b31359f-79be-4c80-b06e-652cb015d9d5",
        "user": "alice",
        "uid": "1001",
        "command": "python",
        "project": "vision",
        "footprint": "large",
        "severity": "warning",
        "class": "idle",
        "reclaim": "true",
    }
    annotations = {
        "summary": f"alice's python holds 6GiB on gpu-node-1 GPU {i % 8} and does no work",
        "description": (
            f"Process {pid} (python) of user alice, project vision, on node gpu-node-1 GPU "
            f"{i % 8} holds 6GiB (large footprint) with per-process utilisation <= 5 %, flat "
            "memory, an idle process tree and no log or heartbeat writes; idle since at "
            "least 2026-12-03 09:14:07 +0000 UTC."
        ),
        "runbook_url": "https://runbook.gpu-reclaimer.example/runbook#gpuprocessidle",
    }
    effective = resolve(Policy(), Facts(user="alice", node="gpu-node-1")).model_dump(mode="json")
    members = [Member(pid, 91_234_567 + i, 1001)] + [
        Member(pid + k, 91_234_600 + i + k, 1001) for k in range(1, 4)
    ]
    facts = {"user": "alice", "uid": 1001, "node": "gpu-node-1", "project": "vision"}
    return Case(
        id=0,
        state=State.NOTIFIED,
        version=0,
        node="gpu-node-1",
        pid=pid,
        start_time=T0 - 3600,
        uuid=labels["uuid"],
        start_ticks=91_234_567 + i,
        boot_id=labels["boot_id"],
        alertname="GpuProcessIdle",
        fingerprint=f"{i:016x}",
        starts_ts=T0 - 600,
        labels=labels,
        annotations=annotations,
        created=T0 - 300,
        updated=T0 - 240,
        user="alice",
        uid=1001,
        project="vision",
        rule="default",
        mode="enforce",
        notified_at=T0 - 240,
        term_at=T0 + 3600,
        cpu_seconds=12.5,
        cpu_at=T0 - 240,
        effective=effective,
        gpu_memory_bytes=6 << 30,
        members=members,
        facts=facts,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200, help="live cases")
    parser.add_argument("--passes", type=int, default=200, help="reads per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--changed", type=float, default=0.05, help="share of cases written before each read"
    )
    args = parser.parse_args()
    if args.cases < 1 or args.passes < 1 or args.rounds < 1 or not 0 <= args.changed <= 1:
        parser.error("--cases, --passes and --rounds must be >= 1, --changed within 0..1")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load {os.getloadavg()[0]:.1f}; code: "
        f"{Path(sys.modules['actuator'].__file__ or '').parent.parent}"
    )
    with tempfile.TemporaryDirectory() as directory:
        store = open_store(str(Path(directory) / "state.db"))
        store.init()
        with store._tx() as conn:
            for i in range(args.cases):
                insert_case(conn, idle_case(i), {"opened": True})
        rng = random.Random(1)
        per_case: list[float] = []
        for _ in range(args.rounds):
            spent = 0.0
            for _ in range(args.passes):
                cases = store.live_cases()
                written = rng.sample(cases, round(len(cases) * args.changed))
                for case in written:
                    case.cpu_seconds = (case.cpu_seconds or 0.0) + 0.01
                if written:
                    store.save_samples_many(written)
                began = time.thread_time()
                store.live_cases()
                spent += time.thread_time() - began
            per_case.append(spent / args.passes / args.cases)
    median = statistics.median(per_case)
    print(
        f"{args.cases} live cases, {args.changed:.0%} written before each read: "
        f"{median * 1e6:.1f} µs per case per read "
        f"({min(per_case) * 1e6:.1f} to {max(per_case) * 1e6:.1f} over {args.rounds} rounds), "
        f"{median * args.cases * 1e3:.2f} ms per pass"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
