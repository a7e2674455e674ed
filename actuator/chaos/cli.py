"""`gpu-reclaimer chaos`: many faults at once against the whole loop on this machine, every
signal judged against the simulated node's ground truth; exit 0 only with no violation."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from exporter import argtypes


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text!r}") from None
    if not 1 <= value <= 24 * 60:
        raise argparse.ArgumentTypeError("between 1 and 1440 minutes")
    return value


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "chaos",
        help="run the whole loop under many faults at once and judge every signal",
        description="Start the deployed shape on loopback (two simulated nodes with an "
        "exporter and an agent each, Prometheus with the shipped rules, Alertmanager, two "
        "actuator replicas in enforce mode on PostgreSQL), run a seeded mix of workloads "
        "with churn and a seeded schedule of faults (components killed and restarted, an "
        "agent hanging, NVML faults, slow and hostile clients, forged and replayed alerts, "
        "the notice channel down, the audit volume full, PostgreSQL restarted), and judge "
        "every signal against the simulated nodes' ground truth. Writes chaos.json and "
        "chaos.md to --out; exits 0 only with no violation.",
    )
    parser.add_argument("--minutes", type=_minutes, default=3.0, help="how long (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="the plan's seed (default 1)")
    parser.add_argument(
        "--out", type=Path, default=Path("chaos-report"), help="where the report goes"
    )
    parser.add_argument(
        "--workdir", type=Path, help="where the run directory goes (default: the temp dir)"
    )
    parser.add_argument(
        "--arrival",
        type=argtypes.duration,
        default=2.0,
        help="mean time between workload starts (default 2s)",
    )
    parser.add_argument(
        "--fault-every",
        type=argtypes.duration,
        default=12.0,
        help="mean time between faults (default 12s)",
    )
    parser.add_argument(
        "--create-users",
        action="store_true",
        help="as root: run the jobs as the day's accounts (day-alice, ...), creating them; "
        "each notice must reach its job's owner",
    )
    parser.add_argument(
        "--max-live",
        type=int,
        default=40,
        help="at most this many workloads alive at once; a start due beyond it is skipped "
        "and counted (default 40)",
    )
    parser.add_argument(
        "--store",
        choices=("auto", "postgres", "sqlite"),
        default="auto",
        help="the actuator's store: a PostgreSQL server of the run's own, restarted as one "
        "of the faults, or SQLite; auto: PostgreSQL where it is installed (default)",
    )
    parser.add_argument(
        "--replicas",
        type=int,
        choices=(1, 2),
        help="actuator replicas on the store (default: two on PostgreSQL, one on SQLite); "
        "with two, Alertmanager posts to both and the kills take the lease holder and the "
        "other in turn",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        choices=(1, 2),
        default=2,
        help="simulated nodes, each with its exporter and agent (default 2; 1 without the agent)",
    )
    parser.add_argument(
        "--no-agent",
        dest="agent",
        action="store_false",
        help="the actuator acts on the node in-process (default: through the node's agent, "
        "over mutual TLS, which hangs and is killed as faults)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from actuator.chaos.report import write
    from actuator.chaos.run import ChaosOptions, run
    from actuator.demo.stack import StackError

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C: the stack stops what it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    options = ChaosOptions(
        minutes=args.minutes,
        seed=args.seed,
        workdir=args.workdir,
        arrival=args.arrival,
        fault_every=args.fault_every,
        create_users=args.create_users,
        max_live=args.max_live,
        store=args.store,
        replicas=args.replicas or 0,
        agent=args.agent,
        nodes=args.nodes,
    )
    try:
        outcome = run(options, progress)
    except StackError as exc:
        print(f"gpu-reclaimer chaos: {exc}", file=sys.stderr)
        return 2
    report = write(outcome, args.out)
    print((args.out / "chaos.md").read_text(encoding="utf-8"))
    return 0 if not report["violations"] else 1
