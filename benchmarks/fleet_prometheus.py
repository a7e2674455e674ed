"""What the shipped rules cost a real Prometheus, per node, in each state a fleet can be in.

    python benchmarks/fleet_prometheus.py [--nodes 100] [--layout 8x3] [--minutes 4]
        [--state live --state frozen] [--interval 15] [--rules VARIANT ...]
        [--rules-file FILE ...] [--prometheus BINARY ...] [--rounds N] [--alone]

Captures one real scrape of `gpu-reclaimer exporter` on a simulated node of real workload
processes (GPUSxPROCESSES: busy, idle and loading in turn, as benchmarks/simnode.py starts
them), then serves it as NODES synthetic nodes (one loopback server; each node a target of
its own, `instance` and `node` rewritten) to real Prometheus servers, one per rule variant
(and per binary, with several --prometheus), that run side by side over the same targets
for the same minutes:

  shipped         alert-rules/gpu-reclaimer.rules.yml as shipped (the alerts' labels on
                  the recorded conditions they read, stored as written)
  no-annotations  the same rules without annotations (the floor: no templates at all; the
                  per-process alerts carry none since 2026-12-06, so only GpuMemoryOrphaned's
                  and the health alerts' differ)
  labels-on-alerts  the conditions' labels moved onto the alerts' `labels:`, whose values
                  Prometheus expands as templates for every active alert at every
                  evaluation (the rules before 2026-12-03)
  --rules-file F  any rules file, e.g. an earlier commit's (git show REV:alert-rules/...;
                  the rules with annotated per-process alerts: 2e4709a)

With several --prometheus binaries (another version, say), every variant runs under each.
This machine's speed drifts from run to run, so compare variants within one run: side by
side (the default), or `--alone` (one server at a time, in turn) with `--rounds N`, which
ends with each variant's median over the rounds and its ratio to the first variant.

States: `live` advances the busy processes' CPU counters and log timestamps every scrape
(what a working node looks like: a third of its processes idle and flagged), `flagged`
serves every process as idle (the busy ones' utilisation read as 0, nothing advancing: every
process pending, then firing GpuProcessIdle), `frozen` serves the capture unchanged (a node
whose values stopped: every process without utilisation turns idle, the busy ones with a
log stalled).

Per Prometheus and state it reports each rule group's evaluation time (median of the last
evaluations, from /api/v1/rules) and its interval (the group's `interval:`, else the global
evaluation interval), and from them the rules' Prometheus CPU per node per second (the sum
over the groups of evaluation time / interval / nodes: a group is evaluated on one core)
and the nodes one core carries in that state (1 s / that figure); also the active alerts,
the head series per node and the dearest rules. Plan with headroom: docs/deployment.md,
"Sizing".
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import requests
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from exporter_scrape import start_exporter  # noqa: E402
from simnode import GiB, start_node  # noqa: E402

from actuator.tools.backtest import RuleSet  # noqa: E402
from tests.support import free_port  # noqa: E402

RULES = REPO / "alert-rules" / "gpu-reclaimer.rules.yml"
GROUP = "gpu-reclaimer"
STATES = ("live", "flagged", "frozen")
VARIANTS = ("shipped", "no-annotations", "labels-on-alerts")
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{.*\})? (?P<value>\S+)$")
_NODE_LABEL = re.compile(r'node="[^"]*"')


# What single PromQL operators cost over every process of the fleet (--operators): the
# building blocks of the recording rules, each as an instant query.
OPERATORS = (
    "gpu_process_memory_used_bytes",
    "gpu_process_memory_used_bytes > 0",
    "count_over_time(gpu_process_memory_used_bytes[1m])",
    "count_over_time(gpu_process_memory_used_bytes[1m]) >= 3",
    "min_over_time(gpu_process_memory_used_bytes[1m])",
    "rate(gpu_process_cpu_seconds_total[1m])",
    "changes(gpu_process_start_time_seconds[1m])",
    'label_replace(gpu_process_memory_used_bytes, "signal", "log", "", "")',
    "gpu_process_memory_used_bytes and on (instance, gpu, uuid, pid) gpu_process_cpu_seconds_total",
    "gpu_process_memory_used_bytes unless on (instance, gpu) gpu_exporter_device_up == 0",
    "gpu_process_info",
    "gpu_process_memory_used_bytes * on (instance, gpu, uuid, pid) group_left (node, user, uid,"
    " command, container, pod, pod_uid, namespace, slurm_job, project, start_time, start_ticks,"
    " boot_id) gpu_process_info",
)


@dataclass
class Sample:
    name: str
    labels: str  # "{...}" or ""
    value: float


@dataclass
class Capture:
    """One exporter scrape, parsed into samples, with which processes were working."""

    samples: list[Sample]
    busy_pids: set[str] = field(default_factory=set)

    def render(self, node: int, state: str, elapsed: float) -> bytes:
        lines = []
        for s in self.samples:
            value = s.value
            if (
                state == "flagged"
                and s.name == "gpu_process_sm_utilization_ratio"
                and _pid(s.labels) in self.busy_pids
            ):
                value = 0.0  # every process idle: nothing advances, nothing computes
            if state == "live" and _pid(s.labels) in self.busy_pids:
                if s.name == "gpu_process_cpu_seconds_total":
                    value += 0.5 * elapsed  # half a core: a working job's DataLoader
                elif s.name == "gpu_process_log_write_timestamp_seconds":
                    value = time.time()
                elif s.name == "gpu_process_memory_used_bytes":
                    value += 1024 * 1024 * (int(elapsed) % 2)  # a little allocator churn
            labels = _NODE_LABEL.sub(f'node="node-{node}"', s.labels)
            lines.append(f"{s.name}{labels} {value!r}")
        return ("\n".join(lines) + "\n").encode()


def _pid(labels: str) -> str | None:
    found = re.search(r'pid="(\d+)"', labels)
    return found.group(1) if found else None


def capture_node(gpus: int, per_gpu: int) -> Capture:
    """A real scrape of the exporter on a simulated node of real processes."""
    workdir = Path(tempfile.mkdtemp(prefix="gpu-reclaimer-fleetprom-"))
    (workdir / "hb").mkdir()
    children: list[subprocess.Popen[bytes]] = []
    try:
        children.extend(start_node(workdir, gpus, per_gpu, 0))
        exporter = start_exporter("this", workdir / "node", workdir, REPO)
        children.append(exporter.process)
        time.sleep(3)  # a few simulated ticks: utilisation settles per phase
        body = requests.get(exporter.url, timeout=30).text
    finally:
        for child in children:
            child.send_signal(signal.SIGKILL)
            child.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    samples = []
    for line in body.splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            samples.append(Sample(match["name"], match["labels"] or "", float(match["value"])))
    busy = {
        pid
        for s in samples
        if s.name == "gpu_process_sm_utilization_ratio" and s.value > 0.05
        if (pid := _pid(s.labels)) is not None
    }
    return Capture(samples, busy)


class _Fleet(BaseHTTPRequestHandler):
    capture: Capture
    state: str
    started: float

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        node = int(query.get("node", ["0"])[0])
        body = self.capture.render(node, self.state, time.monotonic() - self.started)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve_fleet(capture: Capture, state: str) -> tuple[ThreadingHTTPServer, int]:
    port = free_port()
    handler = type(
        "Fleet", (_Fleet,), {"capture": capture, "state": state, "started": time.monotonic()}
    )
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, port


def rules_variant(directory: Path, variant: str) -> Path:
    """The shipped rules, or one of the variants above, or a rules file, written to
    `directory`."""
    if variant.startswith("file:"):
        source = Path(variant.removeprefix("file:"))
        path = directory / f"{len(list(directory.glob('*.rules.yml')))}-{source.name}"
        path.write_text(source.read_text())
        return path
    text = RULES.read_text()
    if variant != "shipped":
        rules = yaml.safe_load(text)
        carried = RuleSet.load(RULES).alerts  # each alert's labels, its condition's included
        for group in rules["groups"]:
            for rule in group["rules"]:
                if variant == "no-annotations":
                    rule.pop("annotations", None)
                if variant == "labels-on-alerts":
                    if "alert" in rule:
                        rule["labels"] = carried[rule["alert"]].labels
                    else:
                        rule.pop("labels", None)
        text = yaml.safe_dump(rules, sort_keys=False)
    path = directory / f"{variant}.rules.yml"
    path.write_text(text)
    return path


def prometheus_config(directory: Path, rules: Path, port: int, nodes: int, interval: int) -> Path:
    config = {
        "global": {"scrape_interval": f"{interval}s", "evaluation_interval": f"{interval}s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "gpu-exporter",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{port}"],
                        "labels": {"instance": f"node-{i}:9835", "__param_node": str(i)},
                    }
                    for i in range(nodes)
                ],
            }
        ],
    }
    path = directory / f"{rules.stem}.prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class GroupTimes:
    """One rule group's evaluations as Prometheus reports them."""

    interval: float
    seconds: list[float] = field(default_factory=list)
    last_evaluation: str = ""

    def median(self) -> float:
        return settled_median(self.seconds)


def settled_median(values: list[float]) -> float:
    """The median of the last two thirds (the first evaluations fill caches and windows)."""
    settled = values[len(values) // 3 :] or values
    return statistics.median(settled) if settled else float("nan")


@dataclass
class Measured:
    variant: str
    url: str
    process: subprocess.Popen[bytes]
    groups: dict[str, GroupTimes] = field(default_factory=dict)
    rules: dict[str, list[float]] = field(default_factory=dict)
    alerts: float = 0.0
    series: float = 0.0
    rss: float = 0.0
    expr_seconds: dict[str, float] = field(default_factory=dict)
    operator_seconds: dict[str, float] = field(default_factory=dict)
    rules_file: Path = RULES

    def query_seconds(self, expr: str, repeat: int = 5) -> float:
        """One instant query's evaluation time as Prometheus reports it (median of `repeat`,
        after one run that is not counted: the first touches cold caches)."""
        took = []
        for _ in range(repeat + 1):
            answer = requests.get(
                f"{self.url}/api/v1/query", params={"query": expr, "stats": "all"}, timeout=60
            ).json()
            took.append(answer["data"]["stats"]["timings"]["evalTotalTime"])
        return statistics.median(took[1:])

    def time_alert_expressions(self, rules: Path) -> None:
        """The alerts' expressions alone, as instant queries (median of 5): the rest of an
        alerting rule's time is per alert (state, labels, annotations, ALERTS series)."""
        for group in yaml.safe_load(rules.read_text())["groups"]:
            for rule in group["rules"]:
                if group["name"] != GROUP or "alert" not in rule:
                    continue
                self.expr_seconds[rule["alert"]] = self.query_seconds(rule["expr"])

    def sample(self) -> None:
        data = requests.get(f"{self.url}/api/v1/rules", timeout=30).json()["data"]
        for group in data["groups"]:
            times = self.groups.setdefault(group["name"], GroupTimes(float(group["interval"])))
            if group["lastEvaluation"] == times.last_evaluation:
                continue
            times.last_evaluation = group["lastEvaluation"]
            if group["lastEvaluation"].startswith("0001-"):
                continue  # not evaluated yet
            times.seconds.append(group["evaluationTime"])
            for rule in group["rules"]:
                name = rule.get("record") or rule.get("name")
                self.rules.setdefault(name, []).append(rule["evaluationTime"])

    def cpu_per_second(self) -> float:
        """Seconds of rule evaluation per second of time, all groups together."""
        return sum(g.median() / g.interval for g in self.groups.values() if g.seconds)

    def head_series(self) -> float:
        status = requests.get(f"{self.url}/api/v1/status/tsdb", timeout=30).json()
        return float(status["data"]["headStats"]["numSeries"])

    def gauge(self, expr: str) -> float:
        result = requests.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=30)
        found = result.json()["data"]["result"]
        return float(found[0]["value"][1]) if found else 0.0


def prometheus_version(binary: str) -> str:
    """`2.42.0` from `prometheus, version 2.42.0+ds (branch: ...)`."""
    first = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"version (\d+\.\d+\.\d+)", first)
    return found.group(1) if found else binary


def start_prometheus(directory: Path, config: Path, variant: str, binary: str) -> Measured:
    port = free_port()
    data = directory / f"{len(list(directory.glob('*-data')))}-data"
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            requests.get(f"{url}/-/ready", timeout=5).raise_for_status()
            return Measured(variant, url, process)
        except requests.RequestException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait()


def run_state(
    capture: Capture,
    state: str,
    nodes: int,
    minutes: float,
    interval: int,
    variants: list[str],
    binaries: list[str],
    operators: bool = False,
) -> list[Measured]:
    directory = Path(tempfile.mkdtemp(prefix="gpu-reclaimer-fleetprom-"))
    server, port = serve_fleet(capture, state)
    with ExitStack() as cleanup:
        cleanup.callback(server.shutdown)
        cleanup.callback(shutil.rmtree, directory, True)
        servers = []
        for variant in variants:
            rules = rules_variant(directory, variant)
            config = prometheus_config(directory, rules, port, nodes, interval)
            for binary in binaries:
                label = variant.removeprefix("file:")
                label = Path(label).name if label != variant else variant
                servers.append(start_prometheus(directory, config, label, binary))
                if len(binaries) > 1:
                    servers[-1].variant += f" on {prometheus_version(binary)}"
                servers[-1].rules_file = rules
                cleanup.callback(stop, servers[-1].process)
        deadline = time.monotonic() + 60 * minutes
        print(f"  {state}: {nodes} nodes for {minutes:g} min ...", flush=True)
        while time.monotonic() < deadline:
            time.sleep(interval / 3)
            for measured in servers:
                measured.sample()
        for measured in servers:
            measured.alerts = measured.gauge("count(ALERTS)")
            measured.series = measured.head_series()
            measured.rss = psutil.Process(measured.process.pid).memory_info().rss
            measured.time_alert_expressions(measured.rules_file)
        for measured in servers[: len(binaries)] if operators else []:
            for expr in OPERATORS:
                measured.operator_seconds[expr] = measured.query_seconds(expr)
        return servers


def median_rows(state: str, figures: dict[str, list[float]]) -> list[str]:
    """Each variant's rules CPU per node per second over the rounds: every round's figure,
    the median, and the median's ratio to the first variant's."""
    first = statistics.median(next(iter(figures.values())))
    rows = []
    for variant, values in figures.items():
        median = statistics.median(values)
        each = ", ".join(f"{1000 * v:.3f}" for v in values)
        rows.append(
            f"| {state} | {variant} | {each} ms | {1000 * median:.3f} ms | {median / first:.2f} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--layout", default="8x3", help="GPUSxPROCESSES of the captured node")
    parser.add_argument(
        "--minutes", type=float, default=4.0, help="per state (>= 4: a few 45 s evaluations)"
    )
    parser.add_argument(
        "--interval",
        type=int,
        default=15,
        help="scrape and global evaluation, s (a group's own `interval:` overrides)",
    )
    parser.add_argument("--state", action="append", choices=STATES)
    parser.add_argument(
        "--rules",
        action="append",
        choices=VARIANTS,
        help="rule variants run side by side (repeatable; default shipped)",
    )
    parser.add_argument(
        "--rules-file",
        action="append",
        default=[],
        metavar="FILE",
        help="also run this rules file side by side (repeatable), e.g. the rules of an earlier "
        "commit: git show REV:alert-rules/gpu-reclaimer.rules.yml > /tmp/before.rules.yml",
    )
    parser.add_argument(
        "--operators",
        action="store_true",
        help="also time single PromQL operators over every process, as instant queries "
        "(the recording rules' building blocks), on the first Prometheus of each binary",
    )
    parser.add_argument(
        "--every-rule",
        action="store_true",
        help="list every rule's evaluation time (median), not only the three dearest",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each state this many times and end with each variant's median and its "
        "ratio to the first variant (this machine's speed drifts between runs: compare "
        "within a round, not across runs)",
    )
    parser.add_argument(
        "--alone",
        action="store_true",
        help="one Prometheus at a time instead of side by side (each variant and binary "
        "alone, in turn, interleaved across --rounds): absolute figures without the "
        "servers contending for the cores",
    )
    parser.add_argument(
        "--prometheus",
        action="append",
        metavar="BINARY",
        help="the Prometheus binary (repeatable: each variant runs under each, side by side; "
        "default `prometheus` on PATH)",
    )
    args = parser.parse_args()
    binaries = args.prometheus or [shutil.which("prometheus") or ""]
    missing = [b for b in binaries if not b or shutil.which(b) is None]
    if missing:
        print(
            "fleet_prometheus: needs `prometheus` on PATH (make system-deps) or --prometheus "
            "BINARY",
            file=sys.stderr,
        )
        return 2
    gpus, per_gpu = (int(x) for x in args.layout.split("x"))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{psutil.virtual_memory().total / GiB:.0f} GiB, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(f"capturing a {args.layout} node ...", flush=True)
    capture = capture_node(gpus, per_gpu)
    pids = {pid for s in capture.samples if (pid := _pid(s.labels)) is not None}
    per_process = sum(1 for s in capture.samples if _pid(s.labels) is not None) / len(pids)
    print(
        f"  {len(capture.samples)} samples, {len(pids)} processes ({len(capture.busy_pids)} "
        f"busy), {per_process:.1f} series per process (what each process start adds)"
    )
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    table: list[str] = []
    operators: list[str] = []
    medians: list[str] = []
    for state in args.state or list(STATES):
        variants = (args.rules or ([] if args.rules_file else ["shipped"])) + [
            f"file:{f}" for f in args.rules_file
        ]
        figures: dict[str, list[float]] = {}
        measured: list[Measured] = []
        for _ in range(args.rounds):
            if args.alone:
                this_round = []
                for variant in variants:
                    for binary in binaries:
                        (alone,) = run_state(
                            capture,
                            state,
                            args.nodes,
                            args.minutes,
                            args.interval,
                            [variant],
                            [binary],
                            args.operators,
                        )
                        if len(binaries) > 1:
                            alone.variant += f" on {prometheus_version(binary)}"
                        this_round.append(alone)
            else:
                this_round = run_state(
                    capture,
                    state,
                    args.nodes,
                    args.minutes,
                    args.interval,
                    variants,
                    binaries,
                    args.operators,
                )
            for m in this_round:
                figures.setdefault(m.variant, []).append(m.cpu_per_second() / args.nodes)
            measured += this_round
        medians += median_rows(state, figures)
        for m in measured:
            for expr, seconds in m.operator_seconds.items():
                operators.append(
                    f"| {state} | {m.variant} | `{expr}` | {1000 * seconds:.2f} ms "
                    f"| {1e6 * seconds / (len(pids) * args.nodes):.2f} µs |"
                )
            per_second = m.cpu_per_second() / args.nodes  # s of CPU per node per s
            groups = ", ".join(
                f"{name} {1000 * g.median() / args.nodes:.2f} ms / {g.interval:g} s"
                for name, g in m.groups.items()
                if g.seconds
            )
            dearest = sorted(
                ((settled_median(v), k) for k, v in m.rules.items()),
                reverse=True,
            )[: None if args.every_rule else 3]
            table.append(
                f"| {args.layout} | {state} | {m.variant} | {args.nodes} "
                f"| {m.series / args.nodes:.0f} | {m.rss / args.nodes / 1e6:.2f} MB "
                f"| {m.alerts:.0f} | {groups} "
                f"| {1000 * per_second:.3f} ms | {1 / per_second:,.0f} "
                f"| {', '.join(f'{k} {1000 * v:.0f} ms' for v, k in dearest)} "
                f"| {', '.join(f'{k} {1000 * v:.0f} ms' for k, v in m.expr_seconds.items())} |"
            )
    print(
        "| node | state | rules | nodes | head series/node | RSS/node | alerts "
        "| per node per evaluation / interval | rules CPU per node per s | nodes per core "
        "| dearest rules (median) | alert expressions alone |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(table))
    if args.rounds > 1 or args.alone:
        how = "alone, in turn" if args.alone else "side by side"
        print(f"\nrules CPU per node per second, {args.rounds} round(s), {how}:")
        print("| state | rules | each round | median | ratio to the first |")
        print("|---|---|---|---|---|")
        print("\n".join(medians))
    if operators:
        processes = len(pids) * args.nodes
        print(f"\nsingle operators over {processes} processes, as instant queries (median of 5):")
        print("| state | Prometheus | operator | evaluation | per process |")
        print("|---|---|---|---|---|")
        print("\n".join(operators))
    return 0


if __name__ == "__main__":
    sys.exit(main())
