"""`gpu-reclaimer tune --since 30d [--project P]`: thresholds fitted to each project's own
history (actuator/tools/tune.py), proposed as a reviewable diff of the rules."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from actuator.tools.backtest_cli import SHIPPED_RULES
from actuator.tools.report_cli import add_history_arguments, connect, period
from actuator.tools.tune import Needs
from exporter import argtypes
from exporter.argtypes import CommandError

THIN_EVIDENCE = 3  # the exit status when no proposal stands on enough evidence


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a utilisation ratio is from 0 to 1, not {text}")
    return value


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "tune",
        help="propose idle thresholds fitted to each project's history",
        description="Run the backtest over a grid of candidate thresholds (per-process SM "
        "utilisation) and hold times (for:) of GpuProcessIdle, and judge each per project by "
        "what the processes it flags did next: a process that resumed work soon after being "
        "flagged (the alert stopped while it lived on) was wrongly flagged. Per project, the "
        "proposal is the candidate that flags the most process-hours with none wrongly "
        "flagged; with --project it is printed as a diff of the rules file. A fitted "
        "threshold needs evidence to stand on: a project whose history holds fewer than "
        "--min-processes GPU processes, or less than --min-history of history, or where no "
        "candidate flagged anything, gets no proposal. Exit status: 0 with a proposal "
        "(with --project: that project's; without: at least one project's), 2 for a usage "
        "error, 3 when the evidence is too thin for any proposal (nothing is written).",
        epilog="Example: gpu-reclaimer tune --prometheus http://prometheus:9090 --since 30d "
        "--project vision --write vision.rules.yml",
    )
    add_history_arguments(parser, timeout=120.0)
    parser.add_argument("--project", help="only this project (and print its proposal's diff)")
    parser.add_argument(
        "--rules", type=Path, default=SHIPPED_RULES, metavar="FILE", help="rules to tune"
    )
    parser.add_argument(
        "--util",
        type=_ratio,
        action="append",
        metavar="RATIO",
        help="candidate utilisation bars (repeatable; default 0.02 0.05 0.1 0.2)",
    )
    parser.add_argument(
        "--for",
        dest="holds",
        type=argtypes.duration,
        action="append",
        metavar="DURATION",
        help="candidate hold times (repeatable; default 5m 10m 20m 30m)",
    )
    parser.add_argument(
        "--resumed-within",
        type=argtypes.duration,
        default=1800.0,
        metavar="DURATION",
        help="a flagged process that worked again within this long of its first firing "
        "was wrongly flagged (default 30m)",
    )
    parser.add_argument(
        "--min-processes",
        type=argtypes.positive_int,
        default=Needs.processes,
        metavar="N",
        help=f"fewest GPU processes a project's proposal stands on (default {Needs.processes})",
    )
    parser.add_argument(
        "--min-history",
        type=argtypes.duration,
        default=Needs.hours * 3600,
        metavar="DURATION",
        help="least history a project's proposal stands on, first to last sample of its "
        f"processes (default {Needs.hours:g}h)",
    )
    parser.add_argument(
        "--step",
        type=argtypes.duration,
        default=60.0,
        help="the evaluation step each candidate is replayed at, like a rule group's "
        "interval (default 60s)",
    )
    parser.add_argument("--write", type=Path, metavar="FILE", help="write the proposed rules")
    parser.set_defaults(func=run_tune)


def run_tune(args: argparse.Namespace) -> int:
    from prometheus_api_client import PrometheusApiClientException
    from requests import RequestException

    from actuator.tools.backtest import BacktestError, RuleSet
    from actuator.tools.tune import DEFAULT_HOLDS, DEFAULT_UTILS, grid, render, rules_diff, tune

    start, end = period(args)
    if args.write is not None and args.project is None:
        raise CommandError("--write needs --project: whose proposal to write")
    if args.step <= 0 or args.resumed_within <= 0 or args.min_history <= 0:
        raise CommandError("--step, --resumed-within and --min-history must be positive")
    candidates = grid(args.util or DEFAULT_UTILS, args.holds or DEFAULT_HOLDS)
    try:
        rules = RuleSet.load(args.rules)
        prom = connect(args.prometheus, args.timeout)

        def progress(step: str) -> None:
            print(f"querying {args.prometheus}: {step} ...", file=sys.stderr, flush=True)

        proposals = tune(
            prom,
            rules,
            candidates,
            start,
            end,
            args.step,
            args.resumed_within,
            args.project,
            progress,
            Needs(processes=args.min_processes, hours=args.min_history / 3600),
        )
    except BacktestError as error:
        raise CommandError(str(error)) from None
    except (RequestException, PrometheusApiClientException) as error:
        raise argtypes.unreachable("Prometheus", args.prometheus, error) from None
    sys.stdout.write(render(proposals))
    if not proposals:
        print(
            "no candidate flagged any GPU process in the period: no evidence to fit, no proposal",
            file=sys.stderr,
        )
        return THIN_EVIDENCE
    if args.project is None:
        if any(p.fitted for p in proposals):
            return 0
        print("not enough evidence for any project: no proposal", file=sys.stderr)
        return THIN_EVIDENCE
    (mine,) = proposals
    if mine.refused:
        print(f"project {args.project}: {mine.refused}; nothing proposed", file=sys.stderr)
        return THIN_EVIDENCE
    if mine.best is None:
        if args.write is not None:
            raise CommandError(f"project {args.project}: no proposal, nothing written")
        return 0
    tuned, diff = rules_diff(args.rules.read_text(), args.rules.name, mine.best.candidate)
    sys.stdout.write(diff or "(the proposal is the rules as they are)\n")
    if args.write is not None:
        try:
            args.write.write_text(tuned)
        except OSError as exc:
            raise CommandError(f"cannot write {args.write}: {exc.strerror}") from None
        print(f"wrote {args.write}", file=sys.stderr)
    return 0
