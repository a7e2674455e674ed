"""Real workloads through the shipped rules: how often would they have flagged a job that
was going to work again?

Two public traces, two questions:

- ``serving``: inference services built from the Azure LLM inference trace's arrivals
  (AzurePublicDataset, ``data/AzureLLMInferenceTrace_{code,conv}.csv``, CC BY 4.0). The
  trace's requests (or its bursts, ``--burst-gap``) are dealt at random to ``--services``
  services: many small endpoints, each called every minute or few, at the rate the whole
  trace rises and falls by. Each
  service's per-scrape series are what the exporter would export for the serving workload
  (``sim run --serve``): SM utilisation = the share of the 15 s its requests kept the GPU
  busy, the prompt and answer bytes on its connections (the network timestamp advanced as
  exporter/netactivity.py advances it, above the keep-alive floor), a listener other hosts
  reach, and its clients: a gateway's connection open from a request until
  ``--client-keepalive`` after it (60 s; 0: a connection per request, seen only by a
  scrape during the request; a client at the trace's start, as it served before), the
  exporter watching for two hours before. The series
  are backfilled into a Prometheus (``promtool tsdb create-blocks-from openmetrics``)
  and the reclaim alerts evaluated over them with the backtest's own query
  (actuator/tools/backtest.py: recording rules written out, ``for:`` held at every step),
  once with the rules from before network evidence (``--before``) and once with the
  shipped ones. A firing is wrongful when the service served a request after it.
- ``philly``: the Philly start windows (``weifanjiang/DRE``, ``data/philly/gpu_util/``, one
  utilisation sample a minute from 10 minutes before to 3 after each job's start; the
  Philly trace is CC BY 4.0): the share of jobs whose every GPU stays at <= 5 % through
  minute k of their start, the start-up ``min_runtime`` must cover. The window ends 3
  minutes after the start, before the rules' earliest firing (6 minutes), so it is
  analysed directly rather than replayed.

    python benchmarks/trace_replay.py serving TRACE.csv [TRACE.csv ...] --services 300
    python benchmarks/trace_replay.py philly DIR   # the gpu_util/ directory

Results, sources and licences: docs/alert-rules.md ("Judged against real workloads").
"""

from __future__ import annotations

import argparse
import csv
import math
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actuator.tools.backtest import RuleSet, firing_query  # noqa: E402
from exporter.netactivity import DEFAULT_FLOOR  # noqa: E402
from exporter.sim.replay import Arrival, read_trace  # noqa: E402
from exporter.sim.serving import BYTES_PER_TOKEN  # noqa: E402
from tests.helpers.prom import backfilled_prometheus  # noqa: E402

SCRAPE = 15.0
SECONDS_PER_TOKEN = 0.02  # generation time per answer token on the GPU
SHIPPED = REPO / "alert-rules" / "gpu-reclaimer.rules.yml"
BEFORE_COMMIT = "7bebf89"  # the last rules without network evidence or the service class
INSTANCE = 'instance="trace:9838",job="gpu-exporter"'
GiB = 1024**3


# -- serving: services from the Azure arrivals ------------------------------------------------


@dataclass
class Service:
    name: str
    requests: list[Arrival] = field(default_factory=list)


def deal(
    arrivals: list[Arrival], services: int, burst_gap: float | None, seed: int
) -> list[Service]:
    """Each request (or, with `burst_gap`, each burst of requests less than that apart)
    dealt at random to one of the services: many small endpoints behind one trace."""
    rng = random.Random(seed)
    dealt = [Service(f"svc-{i:04d}") for i in range(services)]
    if burst_gap is None:
        for arrival in arrivals:
            rng.choice(dealt).requests.append(arrival)
        return dealt
    burst: list[Arrival] = []
    for arrival in arrivals:
        if burst and arrival.offset - burst[-1].offset >= burst_gap:
            rng.choice(dealt).requests.extend(burst)
            burst = []
        burst.append(arrival)
    if burst:
        rng.choice(dealt).requests.extend(burst)
    return dealt


@dataclass(frozen=True)
class Sample:
    t: float
    util: float
    moved: int  # bytes on its connections in the scrape interval
    clients: int = 0  # client connections open at the scrape


def samples(service: Service, span: float, keepalive: float = 60.0) -> list[Sample]:
    busy: dict[int, float] = defaultdict(float)
    moved: dict[int, int] = defaultdict(int)
    for r in service.requests:
        start, length = r.offset, r.max_tokens * SECONDS_PER_TOKEN
        moved[int(start // SCRAPE)] += (r.prompt_tokens + r.max_tokens) * BYTES_PER_TOKEN
        t = start
        while t < start + length:  # spread the GPU time over the scrapes it falls in
            index = int(t // SCRAPE)
            end = min(start + length, (index + 1) * SCRAPE)
            busy[index] += end - t
            t = end
    # The gateway's connection is open from a request's start until `keepalive` after its end.
    spans = [
        (r.offset, r.offset + r.max_tokens * SECONDS_PER_TOKEN + keepalive)
        for r in service.requests
    ]
    return [
        Sample(
            i * SCRAPE,
            min(1.0, busy[i] / SCRAPE),
            moved[i],
            1 if any(a <= i * SCRAPE < b for a, b in spans) else 0,
        )
        for i in range(int(span // SCRAPE) + 1)
    ]


def network_stamps(series: list[Sample], floor: int = DEFAULT_FLOOR) -> list[float | None]:
    """gpu_process_network_last_activity_timestamp_seconds as the exporter advances it:
    data this scrape, and above the floor over the last minute (exporter/netactivity.py)."""
    stamps: list[float | None] = []
    last = None
    window = int(60 // SCRAPE)
    for i, s in enumerate(series):
        recent = sum(x.moved for x in series[max(0, i - window + 1) : i + 1])
        if s.moved and recent > floor:
            last = s.t
        stamps.append(last)
    return stamps


WATCHED_BEFORE = 7200.0  # the exporter read the services' sockets this long before the trace


def openmetrics(services: list[Service], span: float, base: float, keepalive: float = 60.0) -> str:
    lines: dict[str, list[str]] = defaultdict(list)
    ticks = [base + i * SCRAPE for i in range(int(span // SCRAPE) + 1)]
    for t in ticks:
        lines["up"].append(f"up{{{INSTANCE}}} 1 {t:.0f}")
        lines["gpu_exporter_nvml_up"].append(f"gpu_exporter_nvml_up{{{INSTANCE}}} 1 {t:.0f}")
    for index, svc in enumerate(services):
        gpu = f'{INSTANCE},gpu="{index}",uuid="GPU-{index:04d}"'
        proc = f'{gpu},pid="{1000 + index}"'
        info = f'{proc},node="trace",user="{svc.name}",project="serving",command="server"'
        series = samples(svc, span, keepalive)
        stamps = network_stamps(series)
        # The trace is a window of services that served before it: a client at its start.
        last_client = 0.0
        for s, stamp in zip(series, stamps, strict=True):
            at = f"{base + s.t:.0f}"
            lines["gpu_memory_total_bytes"].append(
                f"gpu_memory_total_bytes{{{gpu}}} {80 * GiB} {at}"
            )
            lines["gpu_process_memory_used_bytes"].append(
                f"gpu_process_memory_used_bytes{{{proc}}} {20 * GiB} {at}"
            )
            lines["gpu_process_sm_utilization_ratio"].append(
                f"gpu_process_sm_utilization_ratio{{{proc}}} {s.util:.4f} {at}"
            )
            lines["gpu_process_cpu_seconds"].append(
                f"gpu_process_cpu_seconds_total{{{proc}}} 10 {at}"
            )
            lines["gpu_process_start_time_seconds"].append(
                f"gpu_process_start_time_seconds{{{proc}}} {base - 3600:.0f} {at}"
            )
            lines["gpu_process_info"].append(f"gpu_process_info{{{info}}} 1 {at}")
            for scope, count in (("loopback", 0), ("external", 1)):
                lines["gpu_process_listening_sockets"].append(
                    f'gpu_process_listening_sockets{{{proc},scope="{scope}"}} {count} {at}'
                )
            lines["gpu_process_network_clients"].append(
                f"gpu_process_network_clients{{{proc}}} {s.clients} {at}"
            )
            lines["gpu_process_network_watched_seconds"].append(
                f"gpu_process_network_watched_seconds{{{proc}}} {WATCHED_BEFORE + s.t:.0f} {at}"
            )
            if s.clients:
                last_client = s.t
            lines["gpu_process_network_last_client_timestamp_seconds"].append(
                "gpu_process_network_last_client_timestamp_seconds"
                f"{{{proc}}} {base + last_client:.0f} {at}"
            )
            if stamp is not None:
                lines["gpu_process_network_last_activity_timestamp_seconds"].append(
                    "gpu_process_network_last_activity_timestamp_seconds"
                    f"{{{proc}}} {base + stamp:.0f} {at}"
                )
    out = []
    for family, samples_ in lines.items():
        kind = "counter" if family == "gpu_process_cpu_seconds" else "gauge"
        out.append(f"# TYPE {family} {kind}")
        out.extend(samples_)
    return "\n".join(out) + "\n# EOF\n"


@dataclass
class Episode:
    service: str
    first: float  # offset of its first firing step
    wrongful: bool  # the service served a request after it began


def episodes(
    prom_url: str, rules: RuleSet, alert: str, base: float, span: float, by_user: dict[str, Service]
) -> list[Episode]:
    from prometheus_api_client import PrometheusConnect

    prom = PrometheusConnect(url=prom_url, disable_ssl=True)
    query = firing_query(rules, rules.alerts[alert], SCRAPE)
    found = prom.custom_query_range(
        query,
        start_time=datetime.fromtimestamp(base),
        end_time=datetime.fromtimestamp(base + span),
        step=f"{SCRAPE:g}s",
    )
    out = []
    for one in found:
        name = one["metric"].get("user", "")
        steps = sorted(float(t) - base for t, _ in one["values"])
        runs: list[float] = []
        for i, t in enumerate(steps):
            if i == 0 or t - steps[i - 1] > SCRAPE * 1.5:
                runs.append(t)
        for first in runs:
            later = any(r.offset > first for r in by_user[name].requests)
            out.append(Episode(name, first, later))
    return out


def serving(args: argparse.Namespace) -> int:
    arrivals: list[Arrival] = []
    for path in args.traces:
        arrivals += read_trace(path)
    arrivals.sort(key=lambda a: a.offset)
    span = math.ceil(arrivals[-1].offset / 60) * 60 + 60
    services = deal(arrivals, args.services, args.burst_gap, args.seed)
    quiet = [
        s for s in services if not s.requests
    ]  # never called in the hour: no evidence of serving either way
    services = [s for s in services if s.requests]
    by_user = {s.name: s for s in services}
    before_text = (
        args.before.read_text()
        if args.before
        else subprocess.run(
            [
                "git",
                "-C",
                str(REPO),
                "show",
                f"{BEFORE_COMMIT}:alert-rules/gpu-reclaimer.rules.yml",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    base = (time.time() // 3600 - 48) * 3600
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "before.rules.yml").write_text(before_text)
        before, after = RuleSet.load(work / "before.rules.yml"), RuleSet.load(SHIPPED)
        print(
            f"{len(arrivals)} requests, {len(services)} services with requests "
            f"({len(quiet)} without), {span / 60:.0f} min; backfilling ...",
            file=sys.stderr,
        )
        text = openmetrics(services, span, base, args.client_keepalive)
        with backfilled_prometheus(work, text) as prom:
            found = {
                ("before", "GpuProcessIdle"): episodes(
                    prom.url, before, "GpuProcessIdle", base, span, by_user
                ),
                ("after", "GpuProcessIdle"): episodes(
                    prom.url, after, "GpuProcessIdle", base, span, by_user
                ),
                ("after", "GpuServiceIdle"): episodes(
                    prom.url, after, "GpuServiceIdle", base, span, by_user
                ),
            }
    took = time.perf_counter() - started
    requests = [len(s.requests) for s in services]
    print(
        f"# serving trace: {len(services)} services, {sum(requests)} requests over "
        f"{span / 60:.0f} min (median {sorted(requests)[len(requests) // 2]} a service), "
        + (f"bursts < {args.burst_gap:g}s apart" if args.burst_gap is not None else "requests")
        + f" dealt at random (seed {args.seed}), clients kept {args.client_keepalive:g}s; "
        f"{platform.node()}, {platform.python_version()}, {took:.0f}s"
    )
    print(
        "| rules | alert | firings | services flagged | followed by a request | "
        "the same, of firings with 15 min of trace after them | wrongful per 1,000 services |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for (rules, alert), eps in found.items():
        wrong = sum(e.wrongful for e in eps)
        seen = [e for e in eps if span - e.first >= 900]
        seen_wrong = sum(e.wrongful for e in seen)
        flagged = len({e.service for e in eps})
        print(
            f"| {rules} | {alert} | {len(eps)} | {flagged} | {wrong} ({_share(wrong, eps)}) | "
            f"{seen_wrong} of {len(seen)} ({_share(seen_wrong, seen)}) | "
            f"{1000 * wrong / len(services):.0f} |"
        )
    acted = [e for e in found[("after", "GpuServiceIdle")] if span - e.first >= 3600]
    print(
        f"\nUnder the service class (reclaim_when demand, service_window 1h) the actuator may act "
        f"on a GpuServiceIdle firing only after an hour of quiet: {len(acted)} of them here."
    )
    return 0


def _share(part: int, whole: list[Episode]) -> str:
    return f"{part / len(whole):.0%}" if whole else "-"


# -- philly: start-up windows -----------------------------------------------------------------


def philly(args: argparse.Namespace) -> int:
    files = sorted(Path(args.dir).glob("*.csv"))
    if not files:
        print(f"{args.dir}: no per-job CSV files", file=sys.stderr)
        return 2
    usable = gpus = 0
    idle_through = [0, 0, 0, 0]
    for path in files:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        series = []
        for row in rows:
            values = [row.get(str(m), "") or "" for m in range(4)]
            if all(v.strip() for v in values):
                series.append([float(v) for v in values])
        if not series:
            continue
        usable += 1
        gpus += len(series)
        for k in range(4):
            if all(max(s[: k + 1]) <= args.threshold for s in series):
                idle_through[k] += 1
    print(
        f"# Philly start windows: {len(files)} jobs, {usable} with utilisation for minutes 0-3 "
        f"of their start ({gpus} GPUs); idle = every GPU <= {args.threshold:g} %"
    )
    print(
        "| minutes after start | jobs idle on every GPU so far | share "
        "| left idle since the minute before |"
    )
    print("|---:|---:|---:|---:|")
    for k in range(4):
        drop = "" if k == 0 else f"{(idle_through[k - 1] - idle_through[k]) / usable:.1%}"
        print(f"| 0-{k} | {idle_through[k]} | {idle_through[k] / usable:.1%} | {drop} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("serving", help="services from the Azure LLM inference arrivals")
    one.add_argument("traces", type=Path, nargs="+", help="AzureLLMInferenceTrace_*.csv")
    one.add_argument("--services", type=int, default=1000)
    one.add_argument(
        "--burst-gap",
        type=float,
        help="deal bursts of requests less than this many seconds apart, not requests",
    )
    one.add_argument("--seed", type=int, default=1)
    one.add_argument(
        "--client-keepalive",
        type=float,
        default=60.0,
        help="seconds a gateway keeps a client connection open after a request (0: one "
        "connection per request; default 60)",
    )
    one.add_argument(
        "--before", type=Path, help=f"rules before network evidence (default: git {BEFORE_COMMIT})"
    )
    one.set_defaults(func=serving)
    two = sub.add_parser("philly", help="the Philly start windows (data/philly/gpu_util/)")
    two.add_argument("dir", type=Path)
    two.add_argument("--threshold", type=float, default=5.0, help="idle at or below, percent")
    two.set_defaults(func=philly)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
