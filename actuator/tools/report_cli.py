"""`gpu-reclaimer report`: idle and reclaimed GPU time over a period, from Prometheus."""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
import time
from datetime import datetime
from typing import Any

from exporter import argtypes, units
from exporter.argtypes import CommandError

_RELATIVE = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w|y)?)+$")


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "report",
        help="idle and reclaimed GPU time per user, project and node, from Prometheus",
        description="Read what the exporter, the alert rules and the actuator recorded in "
        "Prometheus over a period: average GPU utilisation, idle GPU-hours, process-hours "
        "and memory GiB-hours (by the rules' own idle definition), per user, project and "
        "node, processes reclaimed and memory freed, and the cost of the idle time.",
        epilog="Times: a duration back from now (7d, 12h) or an ISO date/time "
        "(2026-11-24, 2026-11-24T08:00+08:00).",
    )
    add_history_arguments(parser, timeout=60.0)
    parser.add_argument(
        "--compare-to",
        metavar="DURATION",
        type=argtypes.duration,
        help="also report the period this much earlier, side by side (e.g. 7d)",
    )
    parser.add_argument(
        "--price-per-gpu-hour",
        type=float,
        metavar="X",
        help="the price of a GPU-hour: the idle GPU-hours' cost",
    )
    parser.add_argument(
        "--price-per-kwh",
        type=float,
        metavar="X",
        help="the price of a kWh: the idle energy's cost (idle processes' share of their GPUs' "
        "board power, from gpu_power_usage_watts)",
    )
    parser.add_argument(
        "--grid-carbon",
        type=float,
        metavar="G",
        help="the grid's carbon intensity in g CO2e per kWh: the idle energy's emissions",
    )
    parser.add_argument("--currency", default="", help="shown beside costs, e.g. CNY")
    parser.add_argument(
        "--step",
        type=argtypes.duration,
        default=None,
        metavar="DURATION",
        help="how finely idle time is counted: a process counts for a step when it was "
        "idle within it (default 60s, longer past about a week; at least 1s). A run "
        "recorded with time compressed wants a shorter one: at 1/120, 1s is 2 simulated "
        "minutes",
    )
    parser.add_argument(
        "--format",
        choices=["table", "csv", "json", "markdown"],
        default="table",
        help="table (for a terminal, the default), csv, json or markdown (for a wiki page)",
    )
    parser.set_defaults(func=run_report)


def parse_time(text: str, now: float) -> float:
    """A duration back from `now` (`7d`) or an ISO date/time."""
    if _RELATIVE.match(text):
        try:
            return now - units.parse_duration(text)
        except ValueError as error:
            raise CommandError(str(error)) from None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"not a time: {text!r}; use a duration back from now (7d) or an ISO date/time"
        ) from None
    return moment.timestamp()


def add_history_arguments(parser: argparse.ArgumentParser, *, timeout: float) -> None:
    """The options of every command that reads Prometheus's history (report, backtest,
    tune): where it is, the period, and how long one query may take."""
    parser.add_argument(
        "--prometheus",
        required=True,
        metavar="URL",
        type=argtypes.url,
        help="Prometheus base URL, e.g. http://prometheus:9090",
    )
    parser.add_argument("--since", required=True, metavar="TIME", help="start of the period")
    parser.add_argument("--until", metavar="TIME", help="end of the period (default: now)")
    parser.add_argument(
        "--timeout",
        type=argtypes.duration,
        default=timeout,
        help=f"per query (default {timeout:g}s)",
    )


def connect(url: str, timeout: float) -> Any:
    """A PrometheusConnect that retries briefly and lets the caller say what failed once."""
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    logging.getLogger("urllib3").setLevel(logging.ERROR)  # the error below says it once
    retry = Retry(total=2, backoff_factor=0.2, status_forcelist=[502, 503, 504])
    return PrometheusConnect(url=url, retry=retry, timeout=timeout)


def period(args: argparse.Namespace) -> tuple[float, float]:
    """--since/--until as unix seconds; --since must come first."""
    now = time.time()
    end = parse_time(args.until, now) if args.until else now
    start = parse_time(args.since, now)
    if start >= end:
        raise CommandError("--since must be before --until")
    return start, end


def run_report(args: argparse.Namespace) -> int:
    from prometheus_api_client import PrometheusApiClientException
    from requests import RequestException

    from actuator.tools.report import NoData, Price, build, render

    start, end = period(args)
    if args.price_per_gpu_hour is not None and not 0 <= args.price_per_gpu_hour < math.inf:
        raise CommandError("--price-per-gpu-hour must not be negative (nor nan or inf)")
    if args.grid_carbon is not None and not 0 <= args.grid_carbon < 10_000:
        raise CommandError("--grid-carbon must be g CO2e per kWh, from 0 to 10000")
    if args.price_per_kwh is not None and not 0 <= args.price_per_kwh < math.inf:
        raise CommandError("--price-per-kwh must not be negative (nor nan or inf)")
    prom = connect(args.prometheus, args.timeout)

    def progress(step: str) -> None:
        print(f"querying {args.prometheus}: {step} ...", file=sys.stderr, flush=True)

    try:
        figures = build(prom, start, end, progress, args.step)
        before = None
        if args.compare_to:
            try:
                before = build(
                    prom, start - args.compare_to, end - args.compare_to, progress, args.step
                )
            except NoData as error:  # the current period stands on its own
                print(f"no comparison: {error}", file=sys.stderr)
    except NoData as error:
        raise CommandError(str(error)) from None
    except (RequestException, PrometheusApiClientException) as error:
        raise argtypes.unreachable("Prometheus", args.prometheus, error) from None
    price = Price(args.price_per_gpu_hour, args.currency, args.price_per_kwh, args.grid_carbon)
    sys.stdout.write(render(figures, args.format, price, before))
    return 0
