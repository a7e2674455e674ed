"""End-to-end latency of the whole loop: from "goes idle" to notice and to memory freed.

Starts the demo stack (actuator/demo/stack.py: simulated node, exporter, Prometheus and
Alertmanager with the shipped configs compressed by --scale, actuator in enforce mode) and
N workloads `busy=Bs,idle` with staggered B, so the switches fall at different points of the
scrape/evaluation cycle. For each workload it measures, with wall-clock timestamps:

  T0        the workload's first report in phase `idle` (its file under node/procs/, polled
            every 50 ms; the report follows the switch by at most one tick, 0.25 s)
  alert     the actuator recorded the alert (case created)
  notice    the actuator sent the notice (case notified_at)
  freed     the simulated GPU stopped listing the process (polled every 50 ms)

and compares them with the sum of the configured windows (all x scale):
  T0 -> alert  : rule window + `for:` + Alertmanager group_wait
  T0 -> notice : the above + the actuator's CPU window (it needs two samples)
  notice -> freed : grace (+ the exit itself)
The overhead is measured minus that sum; target: T0 -> notice overhead <= scrape interval +
evaluation interval + group_wait + 1 s.

    python benchmarks/e2e_latency.py                    # 6 workloads, scale 1/15
    python benchmarks/e2e_latency.py --workloads 10 --grace 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from fractions import Fraction

from actuator.demo.ruleset import REFERENCE_EVAL_INTERVAL_S
from actuator.demo.stack import Stack, StackError, StackOptions, Workload
from exporter import argtypes
from exporter.sim.state import read_procs

RULE_WINDOW_S = 60.0  # the rules' [1m]
RULE_FOR_S = 300.0  # `for: 5m`
GROUP_WAIT_S = 10.0  # deploy/alertmanager.yml
CPU_WINDOW_S = 1.0  # the actuator's idle.cpu_window (not scaled)


@dataclass
class Sample:
    workload: Workload
    t0: float | None = None
    alert: float | None = None
    notice: float | None = None
    freed: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


def _scaled(seconds: float, scale: float, floor: float) -> float:
    return max(seconds * scale, floor)


def measure(args: argparse.Namespace) -> int:
    scale = args.scale
    interval = REFERENCE_EVAL_INTERVAL_S * scale
    window = _scaled(RULE_WINDOW_S, scale, 2 * interval)
    hold = _scaled(RULE_FOR_S, scale, 2 * interval)
    group_wait = _scaled(GROUP_WAIT_S, scale, interval)
    to_alert = window + hold + group_wait
    to_notice = to_alert + CPU_WINDOW_S
    budget = interval + interval + group_wait + 1.0

    options = StackOptions(scale=scale, grace=args.grace, term_timeout=5.0, label="bench")
    try:
        stack = Stack(options).start()
    except StackError as exc:
        print(f"e2e_latency: {exc}", file=sys.stderr)
        return 2
    try:
        stack.wait_scraped()
        samples: list[Sample] = []
        for i in range(args.workloads):
            busy = 3.0 + i * 0.37  # staggered against the 1 s scrape/evaluation grid
            samples.append(
                Sample(
                    stack.spawn(
                        f"bench {i}",
                        name="yolo",
                        phases=f"busy={busy:g}s,idle",
                        memory="4GiB",
                        gpu=i % options.gpus,
                    )
                )
            )
        deadline = time.monotonic() + to_notice + args.grace + 60
        next_api = 0.0
        while time.monotonic() < deadline and any(s.freed is None for s in samples):
            now = time.time()
            listed = {p.pid: p for p in read_procs(stack.node_dir)}
            for s in samples:
                proc = listed.get(s.workload.pid)
                if s.t0 is None and proc is not None and proc.extra.get("phase") == "idle":
                    s.t0 = proc.updated
                if s.t0 is not None and s.freed is None and proc is None:
                    s.freed = now
            if now >= next_api:
                next_api = now + 0.25
                for case in stack.actuator_api("/api/v1/cases", limit=1000)["cases"]:
                    for s in samples:
                        if case["target"]["pid"] == s.workload.pid:
                            s.alert = s.alert or case["created"]
                            s.notice = s.notice or case["notified_at"]
            time.sleep(0.05)
    finally:
        stack.stop()

    done = [s for s in samples if None not in (s.t0, s.alert, s.notice, s.freed)]
    load = os.getloadavg()[0]
    print(
        f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}, load avg {load:.1f}"
    )
    print(
        f"scale {Fraction(scale).limit_denominator(1000)}: scrape = evaluation = {interval:g} s, "
        f"window {window:g} s, for {hold:g} s, group_wait {group_wait:g} s, "
        f"cpu_window {CPU_WINDOW_S:g} s, grace {args.grace:g} s"
    )
    print(
        f"configured: T0->alert {to_alert:g} s, T0->notice {to_notice:g} s, "
        f"notice->freed {args.grace:g} s; overhead target (T0->notice) <= {budget:g} s\n"
    )
    print(
        f"{'workload':<10} {'T0->alert':>10} {'T0->notice':>11} {'overhead':>9} "
        f"{'notice->freed':>14} {'overhead':>9} {'T0->freed':>10}"
    )
    rows = []
    for s in done:
        assert s.t0 is not None and s.alert and s.notice and s.freed
        row = (
            s.alert - s.t0,
            s.notice - s.t0,
            s.notice - s.t0 - to_notice,
            s.freed - s.notice,
            s.freed - s.notice - args.grace,
            s.freed - s.t0,
        )
        rows.append(row)
        print(
            f"{s.workload.label:<10} {row[0]:>9.2f}s {row[1]:>10.2f}s {row[2]:>+8.2f}s "
            f"{row[3]:>13.2f}s {row[4]:>+8.2f}s {row[5]:>9.2f}s"
        )
    missing = len(samples) - len(done)
    if not rows:
        print("no workload completed the loop", file=sys.stderr)
        return 1
    columns = list(zip(*rows, strict=True))
    for name, index in (("min", 0), ("median", 1), ("max", 2)):
        pick = {0: min, 1: statistics.median, 2: max}[index]
        vals = [pick(c) for c in columns]
        print(
            f"{name:<10} {vals[0]:>9.2f}s {vals[1]:>10.2f}s {vals[2]:>+8.2f}s "
            f"{vals[3]:>13.2f}s {vals[4]:>+8.2f}s {vals[5]:>9.2f}s"
        )
    worst = max(columns[2])
    verdict = "within" if worst <= budget else "OVER"
    print(
        f"\nworst T0->notice overhead {worst:+.2f} s: {verdict} the target of {budget:g} s"
        + (f"; {missing} workload(s) did not finish" if missing else "")
    )
    return 0 if worst <= budget and not missing else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=6)
    parser.add_argument("--grace", type=argtypes.duration, default=5.0, help="notice -> SIGTERM")
    parser.add_argument("--scale", type=lambda t: float(Fraction(t)), default=1 / 15)
    return measure(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
