"""CPU, fsyncs and file opens per case in the actuator, from the alert to the reclaim, on
the real stack (actuator/demo/stack.py: the exporter, Prometheus, Alertmanager and the
actuator with one gunicorn worker, enforce mode, a 2 s grace unless --grace).

    python benchmarks/actuator_cases.py [--cases 100] [--rounds 1]

Starts CASES idle workloads on an 8-GPU simulated node, measures the actuator's process tree
at rest for a while (its ticks with nothing to do), then posts one alert per workload (in
batches of 10, as Alertmanager groups them) and measures until every case is reclaimed and
its owner has had both notices (the warning and the follow-up).
CPU is psutil's user + system time of the actuator's processes; fsync/fdatasync and openat
are counted by `strace -f -c` attached to them for both periods (`--no-strace`: CPU alone,
without strace's own cost; `--profile FILE`: py-spy's stacks of the worker while the cases
run). Per case = (busy - rest scaled to the same duration) / cases. Run as root (strace
attaches to the actuator). `--rounds N` repeats the cases N times on the same stack (new
workloads each round, the rest measured before each) and gives each round's figure and
their median: a single round moves by about 10 % between runs of the same code.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actuator.demo.stack import Stack, StackOptions, Workload  # noqa: E402
from exporter import procfs  # noqa: E402
from exporter.sim.state import load_node, read_procs  # noqa: E402

COUNTED = ("fsync", "fdatasync", "openat")
NOTICES = "/notice"  # where the stack's chat robot stand-in takes owner notices


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            times = p.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


class Strace:
    """`strace -f -c` on the actuator's processes; the counts when it detaches."""

    def __init__(self, procs: list[psutil.Process]) -> None:
        args = ["strace", "-f", "-c", "-e", "trace=" + ",".join(COUNTED)]
        for p in procs:
            args += ["-p", str(p.pid)]
        self.process = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # attached

    def stop(self) -> dict[str, int]:
        self.process.send_signal(signal.SIGINT)
        _, err = self.process.communicate(timeout=30)
        counts = {name: 0 for name in COUNTED}
        for line in err.splitlines():
            parts = line.split()
            if parts and parts[-1] in counts and len(parts) >= 5:
                counts[parts[-1]] = int(parts[3])
        return counts


def _profiler(procs: list[psutil.Process], out: Path) -> subprocess.Popen[bytes]:
    """py-spy on the actuator's processes (the reconciler runs in a gunicorn worker),
    sampling without pausing them, until SIGINT."""
    profiler = subprocess.Popen(
        [
            "py-spy",
            "record",
            "--pid",
            str(procs[0].pid),
            "--subprocesses",
            "--format",
            "raw",
            "--nonblocking",
            "--gil",
            "--rate",
            "200",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # attached
    return profiler


def _alert(stack: Stack, pid: int, ticks: int, uuid: str) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {
            "alertname": "GpuProcessIdle",
            "reclaim": "true",
            "severity": "warning",
            "node": stack.options.node_name,
            "pid": str(pid),
            "uuid": uuid,
            "start_ticks": str(ticks),
            "boot_id": procfs.boot_id(),
        },
        "annotations": {"start_time": repr(psutil.Process(pid).create_time())},
        "startsAt": datetime.now(UTC).isoformat(),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://benchmark",
        "fingerprint": f"bench-{pid}-{ticks}",
    }


def _reclaimed(stack: Stack) -> int:
    cases = stack.actuator_api("/api/v1/cases", state="reclaimed", limit=1000)["cases"]
    return len(cases)


def _wait_done(stack: Stack, workloads: list[Workload], before: int = 0) -> None:
    """Until every case's life is over: its workload gone, its warning and its follow-up
    (the notice that says it was reclaimed) on the chat stand-in, and the case reclaimed.
    A pass commits its reclaims before it sends their follow-ups, so the reclaimed count
    alone ends the measurement before the last pass's follow-ups are sent. All of this is
    watched from here, at no cost to the actuator, except the case list (a query and a
    JSON list that grows with the cases), read once the rest is done."""
    stack.wait_for(
        lambda: not any(w.managed.running() for w in workloads), 600, "every workload gone"
    )
    notices = 2 * (len(workloads) + before)
    stack.wait_for(lambda: len(stack.sink.posts(NOTICES)) >= notices, 120, f"{notices} notices")
    stack.wait_for(lambda: _reclaimed(stack) >= len(workloads) + before, 60, "every case reclaimed")


def _silence_the_rules(stack: Stack) -> None:
    """The stack's own rules would raise the same workloads' alerts once they have been idle
    for the (compressed) windows, and Alertmanager would deliver them to the actuator in the
    middle of a round or in the next round's rest: silenced for the run (a real silence, in
    the stack's Alertmanager), so only this benchmark's alerts are measured."""
    now = datetime.now(UTC)
    silence = {
        "matchers": [{"name": "reclaim", "value": "true", "isRegex": False, "isEqual": True}],
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=6)).isoformat(),
        "createdBy": "benchmarks/actuator_cases.py",
        "comment": "only the benchmark's own alerts reach the actuator",
    }
    stack.session.post(
        stack.url("alertmanager") + "/api/v2/silences", json=silence, timeout=10
    ).raise_for_status()


@dataclass(frozen=True)
class Round:
    cpu_ms: float  # per case, net of the rest
    counted: dict[str, float]  # per case, net of the rest (strace)
    busy_s: float
    rest_cpu_per_s: float
    rest_counts: dict[str, float]  # per second at rest (strace)
    host: int  # processes on the host while it ran
    refused: int  # cases refused so far (unknown evidence under load: re-armed minutes later)


def _settle(limit_s: float = 120.0) -> None:
    """Until the host is quiet again after starting the workloads (two seconds in a row
    under half its CPUs busy): a Python process takes most of a second of CPU to start,
    and alerts sent into that crowd meet an NVML reading that cannot answer within its
    bound, so their cases are refused (safe, and re-armed minutes later, which is not
    what this measures)."""
    deadline, quiet = time.monotonic() + limit_s, 0
    while quiet < 2 and time.monotonic() < deadline:
        quiet = quiet + 1 if psutil.cpu_percent(interval=1.0) < 50 else 0
    if quiet < 2:
        print(f"the host stayed busy for {limit_s:.0f}s after the start; going on", flush=True)


def _round(
    stack: Stack, procs: list[psutil.Process], args: argparse.Namespace, number: int
) -> Round:
    """One round: CASES new idle workloads, the rest measured, then their alerts until
    every case is over."""
    print(f"starting {args.cases} idle workloads ...", flush=True)
    workloads = [
        stack.spawn(f"idle-{number}-{i}", phases="idle", gpu=i % 8, memory="1GiB", wait=False)
        for i in range(args.cases)
    ]
    stack.wait_for(lambda: len(read_procs(stack.node_dir)) >= args.cases, 300, "the workloads")
    _settle()
    gpus = load_node(stack.node_dir).gpus
    ticks = {s.pid: s.start_ticks for s in read_procs(stack.node_dir)}
    host = sum(1 for name in os.listdir("/proc") if name.isdigit())

    trace = Strace(procs) if args.strace else None
    cpu0, t0 = _cpu(procs), time.monotonic()
    time.sleep(args.rest)
    rest_cpu, rest_s = _cpu(procs) - cpu0, time.monotonic() - t0
    rest = trace.stop() if trace else {}

    trace = Strace(procs) if args.strace else None
    profiler = _profiler(procs, args.profile) if args.profile and number == 0 else None
    cpu0, t0 = _cpu(procs), time.monotonic()
    alerts = [_alert(stack, w.pid, ticks[w.pid], gpus[w.gpu].uuid) for w in workloads]
    for i in range(0, len(alerts), 10):
        body = {"version": "4", "status": "firing", "receiver": "reclaim"}
        stack.session.post(
            stack.url("actuator") + "/api/v1/alerts",
            json={**body, "alerts": alerts[i : i + 10]},
            timeout=30,
        ).raise_for_status()
    _wait_done(stack, workloads, before=number * args.cases)
    busy_cpu, busy_s = _cpu(procs) - cpu0, time.monotonic() - t0
    refused = len(stack.actuator_api("/api/v1/cases", state="refused", limit=1000)["cases"])
    busy = trace.stop() if trace else {}
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(60)
    scale, n = busy_s / rest_s, args.cases
    return Round(
        cpu_ms=1000 * (busy_cpu - rest_cpu * scale) / n,
        counted={k: (busy[k] - rest[k] * scale) / n for k in COUNTED} if trace else {},
        busy_s=busy_s,
        rest_cpu_per_s=rest_cpu / rest_s,
        rest_counts={k: rest[k] / rest_s for k in COUNTED} if trace else {},
        host=host,
        refused=refused,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument(
        "--rounds", type=int, default=1, help="the cases again on the same stack; the median"
    )
    parser.add_argument("--rest", type=float, default=20.0, help="seconds measured at rest")
    parser.add_argument(
        "--no-strace",
        dest="strace",
        action="store_false",
        help="CPU only: strace's stops on every system call cost the actuator CPU of their own",
    )
    parser.add_argument(
        "--recheck-waiting",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="reconciler.recheck_waiting: how often a warned case is re-checked while it "
        "waits out its grace (default 5, as shipped; 0.25: at every tick, as before the "
        "setting existed)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="notice -> SIGTERM (default 2; a real grace is minutes, and a case's cost then "
        "grows with it by its re-checks while it waits)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="also sample the actuator's worker with py-spy (on PATH) while the cases run, "
        "and write its collapsed stacks here (flamegraph.pl or speedscope read them)",
    )
    args = parser.parse_args()
    if args.rounds * args.cases > 1000:
        parser.error("--rounds x --cases is at most 1000 (the case list read to count them)")
    if args.strace and os.geteuid() != 0:
        print("run as root: strace attaches to the actuator's processes", file=sys.stderr)
        return 2
    options = StackOptions(
        label="bench-cases",
        gpus=8,
        grace=args.grace,
        term_timeout=3.0,
        workers=1,
        policy={
            "limits": {"terminations_per_node_per_hour": 100000, "terminations_per_minute": 10000},
            "reconciler": {"recheck_waiting": f"{args.recheck_waiting:g}s"},
        },
    )
    figures: list[Round] = []
    with Stack(options) as stack:
        stack.wait_scraped()
        _silence_the_rules(stack)
        procs = _tree(stack.services["actuator"].pid)
        for number in range(args.rounds):
            figures.append(_round(stack, procs, args, number))
            print(f"round {number + 1}: {figures[-1].cpu_ms:.1f} ms CPU per case", flush=True)
            if figures[-1].refused:
                print(
                    f"  {figures[-1].refused} case(s) refused so far on unknown evidence (the "
                    "host too busy for NVML's bound): re-armed minutes later, inside the round",
                    flush=True,
                )
    last = figures[-1]
    n = args.cases
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}; {last.host} processes on "
        f"the host; {n} cases reclaimed in {last.busy_s:.1f}s (last round); grace "
        f"{args.grace:g}s, recheck_waiting {args.recheck_waiting:g}s; {args.rounds} round(s)"
    )
    print("| per case (alert to reclaim) | actuator, net of its rest |")
    print("|---|---|")
    cpu = [f.cpu_ms for f in figures]
    spread = f" ({min(cpu):.1f} to {max(cpu):.1f})" if len(cpu) > 1 else ""
    print(f"| CPU | {statistics.median(cpu):.1f} ms{spread} |")
    for name in COUNTED if args.strace else ():
        counts = [f.counted[name] for f in figures]
        print(f"| {name} | {statistics.median(counts):.1f} |")
    print(
        f"at rest: {1000 * last.rest_cpu_per_s:.1f} ms CPU/s"
        + "".join(f", {name} {last.rest_counts[name]:.1f}/s" for name in COUNTED if args.strace)
        + ("" if args.strace else " (no strace: CPU without its overhead)")
    )
    if args.profile:
        print(f"profile: {args.profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
