"""`gpu-reclaimer backtest`: what candidate alert rules would have flagged over a period,
next to what the shipped rules flagged, evaluated by Prometheus on its own history."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

from actuator.tools.report_cli import add_history_arguments, connect, period
from exporter import argtypes
from exporter.argtypes import CommandError

SHIPPED_RULES = Path(__file__).resolve().parents[2] / "alert-rules" / "gpu-reclaimer.rules.yml"
_THRESHOLD = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)=(.+)$")


def threshold(text: str) -> tuple[str, float]:
    found = _THRESHOLD.match(text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"not SERIES=NUMBER: {text!r}")
    try:
        return found.group(1), float(found.group(2))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {found.group(2)!r}") from None


def hold(text: str) -> tuple[str | None, float]:
    name, _, duration = text.rpartition("=")
    return (name or None), argtypes.duration(duration)


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "backtest",
        help="what a rule change would have flagged, from Prometheus's history",
        description="Evaluate candidate alert rules over the history Prometheus holds and "
        "compare them with the baseline (the shipped rules): per alert, the processes that "
        "would have been flagged, for how long and holding how much memory, and which are "
        "newly flagged or no longer flagged. Prometheus evaluates every expression (the "
        "recording rules they use are written out, so new thresholds apply all the way "
        "down); `for:` is held at the step.",
        epilog="Examples: --threshold gpu_process:sm_utilization_ratio:max_window=0.1 "
        "(idle means util <= 10 %); --for 15m (every alert); --for GpuProcessIdle=30m; "
        "--rules my-rules.yml. Times: a duration back from now (7d) or an ISO date/time.",
    )
    add_history_arguments(parser, timeout=120.0)
    parser.add_argument(
        "--rules",
        type=Path,
        metavar="FILE",
        help="candidate rules file (default: the baseline, with the overrides below)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="FILE",
        default=SHIPPED_RULES,
        help="rules to compare with (default: the shipped alert-rules/gpu-reclaimer.rules.yml)",
    )
    parser.add_argument(
        "--threshold",
        type=threshold,
        action="append",
        default=[],
        metavar="SERIES=NUMBER",
        help="in the candidate, compare SERIES with NUMBER wherever a rule "
        "compares it with a number (repeatable)",
    )
    parser.add_argument(
        "--for",
        dest="holds",
        type=hold,
        action="append",
        default=[],
        metavar="[ALERT=]DURATION",
        help="in the candidate, a new `for:` for ALERT, or for every alert (repeatable)",
    )
    parser.add_argument(
        "--alert",
        action="append",
        default=[],
        metavar="NAME",
        help='alerts to compare (default: the reclaim alerts, reclaim="true")',
    )
    parser.add_argument(
        "--step",
        type=argtypes.duration,
        default=60.0,
        help="evaluation step, like a rule group's interval (default 60s)",
    )
    parser.add_argument("--format", choices=["table", "csv", "json", "markdown"], default="table")
    parser.set_defaults(func=run_backtest)


def run_backtest(args: argparse.Namespace) -> int:
    from prometheus_api_client import PrometheusApiClientException
    from requests import RequestException

    from actuator.tools.backtest import BacktestError, RuleSet, compare, reclaim_alerts, render

    start, end = period(args)
    if args.step <= 0:
        raise CommandError("--step must be positive")
    try:
        baseline = RuleSet.load(args.baseline)
        candidate = RuleSet.load(args.rules) if args.rules else baseline
        candidate = candidate.with_thresholds(dict(args.threshold))
        candidate = candidate.with_hold(dict(args.holds))
        alerts = args.alert or reclaim_alerts(baseline)
        if not alerts:
            raise BacktestError(f"{baseline.origin} has no reclaim alerts; name one with --alert")
        prom = connect(args.prometheus, args.timeout)

        def progress(step: str) -> None:
            print(f"querying {args.prometheus}: {step} ...", file=sys.stderr, flush=True)

        comparisons = compare(prom, candidate, baseline, alerts, start, end, args.step, progress)
    except BacktestError as error:
        raise CommandError(str(error)) from None
    except (RequestException, PrometheusApiClientException) as error:
        raise argtypes.unreachable("Prometheus", args.prometheus, error) from None
    header = (
        f"backtest {_iso(start)} .. {_iso(end)}, step {args.step:g}s: candidate "
        f"{_describe(args)} vs baseline {args.baseline.name}"
    )
    sys.stdout.write(render(comparisons, args.format, header))
    return 0


def _describe(args: argparse.Namespace) -> str:
    parts = [args.rules.name if args.rules else args.baseline.name]
    parts += [f"{name}={value:g}" for name, value in args.threshold]
    parts += [f"for {name + '=' if name else ''}{seconds:g}s" for name, seconds in args.holds]
    return " ".join(parts)


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
