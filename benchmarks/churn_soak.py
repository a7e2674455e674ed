"""Case 46 (a 24 h soak with one process start or exit per second) in compressed form:
process churn against the exporter and a node agent for a long time, their descriptors,
threads, memory and series watched for leaks.

    python benchmarks/churn_soak.py [--minutes 30] [--rate 10] [--live 64] [--out soak.json]

A simulated 8-GPU node keeps LIVE GPU processes: real processes (`sleep`), each registered
with the simulated driver as holding 1 GiB, every other one with a heartbeat file. RATE
times a second the oldest is retired the way the actuator retires one, through the node
agent over mutual TLS: inspected, sent SIGTERM (the agent's pidfds and its journal of
steps), checked gone and its GPU listed; then a new one starts. The exporter is scraped
every SCRAPE_EVERY seconds with Prometheus's Accept header. Every SAMPLE seconds the run
records each component's descriptors, threads and RSS, and the scrape's series.

At RATE 10 a 30-minute run is 18,000 starts and as many exits (five hours of the case's one
per second) and 1,800 scrapes (seven and a half hours at a 15 s interval): what leaks per
process or per scrape shows as it would over a day. Time-based growth (a cache that ages
out after hours) is what the compression cannot show.

The report: per component, after a warm-up (modules loaded, caches filled once), the medians
of the first and the last tenth of the samples (RSS growth in %), descriptors and threads
min/max, the per-process series
per live process, and the retirement errors (there should be none).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import requests
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actuator.demo.agent import SimAgent  # noqa: E402
from actuator.fleet import certs  # noqa: E402
from actuator.fleet.remote import ClientTls, RemoteNode  # noqa: E402
from actuator.live import target_of  # noqa: E402
from actuator.models import Member  # noqa: E402
from exporter import procfs  # noqa: E402
from exporter.sim.state import ProcState, init_node, load_node, proc_path, write_proc  # noqa: E402
from tests.support import free_port  # noqa: E402

NODE = "soak-node"
GPUS = 8
GiB = 1024**3
PROMETHEUS_ACCEPT = "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"


@dataclass
class Sample:
    at: float  # seconds since the churn began
    retired: int  # processes retired so far
    live: int
    series: int  # every sample line of the last scrape
    process_series: int  # gpu_process_* lines
    components: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class Churned:
    popen: subprocess.Popen[bytes]
    pid: int
    start_ticks: int
    uuid: str
    heartbeat: Path | None


def _usage(pid: int) -> dict[str, float]:
    """Descriptors, threads and RSS (MiB) of a process and its children, summed."""
    root = psutil.Process(pid)
    fds = threads = rss = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            fds += p.num_fds()
            threads += p.num_threads()
            rss += p.memory_info().rss / 2**20
        except psutil.Error:
            continue
    return {"fds": fds, "threads": threads, "rss_mib": round(rss, 1)}


def _heartbeat(directory: Path, pid: int, ticks: int) -> Path:
    """One heartbeat file, as exporter.heartbeat writes it (host PID namespace)."""
    link = os.readlink(f"/proc/{pid}/ns/pid")
    namespace = int(link[link.index("[") + 1 : link.index("]")])
    record = {
        "pid": pid,
        "pid_namespace": namespace,
        "start_ticks": ticks,
        "timestamp": time.time(),
    }
    path = directory / f"{namespace}-{pid}.json"
    path.with_suffix(".tmp").write_text(json.dumps(record))
    path.with_suffix(".tmp").rename(path)
    return path


class Soak:
    def __init__(self, workdir: Path, live: int) -> None:
        self.workdir, self.live_target = workdir, live
        self.node_dir, self.hb_dir, self.certs_dir = (
            workdir / "node",
            workdir / "hb",
            workdir / "certs",
        )
        self.hb_dir.mkdir(parents=True)
        init_node(self.node_dir, gpus=GPUS, memory_total=80 * GiB, name="NVIDIA H100 80GB HBM3")
        self.uuids = [g.uuid for g in load_node(self.node_dir).gpus]
        self.live: deque[Churned] = deque()
        self.started = itertools.count()
        self.errors: list[str] = []
        self.retired = 0
        self.services: dict[str, subprocess.Popen[bytes]] = {}

    # -- the components -------------------------------------------------------------------

    def start_components(self) -> None:
        certs.make_ca(self.certs_dir)
        certs.issue_actuator(self.certs_dir)
        certs.issue_agent(self.certs_dir, NODE, ips=("127.0.0.1",))
        config = self.workdir / "agent.yml"
        config.write_text(
            yaml.safe_dump({"protect": {"protect_root": False, "protected_uid_below": 0}})
        )
        agent_port, exporter_port = free_port(), free_port()
        agent = SimAgent(
            node=NODE,
            listen=f"127.0.0.1:{agent_port}",
            config=config,
            sim_dir=self.node_dir,
            heartbeat_dir=self.hb_dir,
            certs_dir=self.certs_dir,
            journal=self.workdir / "journal.db",
        )
        command = [sys.executable, "-m", "exporter.cli"]
        logs = (self.workdir / "components.log").open("ab")
        self.services["agent"] = subprocess.Popen(
            [*command, *agent.arguments()], stdout=logs, stderr=logs, cwd=REPO
        )
        self.services["exporter"] = subprocess.Popen(
            [
                *command,
                "exporter",
                "--listen",
                f"127.0.0.1:{exporter_port}",
                "--sim-dir",
                str(self.node_dir),
                "--heartbeat-dir",
                str(self.hb_dir),
            ],
            stdout=logs,
            stderr=logs,
            cwd=REPO,
        )
        tls = ClientTls(
            str(self.certs_dir / "ca.pem"),
            str(self.certs_dir / "actuator.pem"),
            str(self.certs_dir / "actuator.key"),
        )
        agent_url = f"https://127.0.0.1:{agent_port}"
        self.metrics_url = f"http://127.0.0.1:{exporter_port}/metrics"
        deadline = time.monotonic() + 60
        while True:
            try:
                tls.session().get(agent_url + "/-/healthy", timeout=5).raise_for_status()
                requests.get(self.metrics_url, timeout=5).raise_for_status()
                # Made once the agent answers: a client backs off after a failed call.
                self.agent = RemoteNode(NODE, agent_url, tls, timeout=10)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        "the exporter or the agent did not start; see "
                        f"{self.workdir / 'components.log'}"
                    ) from None
                time.sleep(0.3)

    def stop(self) -> None:
        for churned in self.live:
            churned.popen.kill()
            churned.popen.wait(10)
        for service in self.services.values():
            service.terminate()
            try:
                service.wait(15)
            except subprocess.TimeoutExpired:
                service.kill()

    # -- churn ----------------------------------------------------------------------------

    def start_one(self) -> None:
        n = next(self.started)
        popen = subprocess.Popen(["sleep", "100000"])
        ticks = procfs.start_ticks(popen.pid)
        assert ticks is not None
        gpu = n % GPUS
        write_proc(
            self.node_dir,
            ProcState(popen.pid, ticks, gpu, GiB, 0, updated=time.time()),
        )
        beat = _heartbeat(self.hb_dir, popen.pid, ticks) if n % 2 == 0 else None
        self.live.append(Churned(popen, popen.pid, ticks, self.uuids[gpu], beat))

    def retire_oldest(self) -> None:
        """As the actuator retires a process through the agent: inspect, SIGTERM, gone."""
        old = self.live.popleft()
        try:
            target = target_of(NODE, old.pid, old.uuid)
            live = self.agent.inspect(target)
            if not live.exists or live.start_ticks != old.start_ticks:
                self.errors.append(f"pid {old.pid}: inspected as gone or another process")
            results = self.agent.signal_tree(
                target,
                live.members,
                signal.SIGTERM,
                dry_run=False,
                key=f"soak-{old.pid}-{old.start_ticks}",
            )
            if not any(r.sent for r in results):
                self.errors.append(f"pid {old.pid}: not signalled: {results}")
            old.popen.wait(10)
            proc_path(self.node_dir, old.pid).unlink(missing_ok=True)  # the driver frees it
            if old.heartbeat is not None:
                old.heartbeat.unlink(missing_ok=True)
            if self.agent.alive([Member(old.pid, old.start_ticks)]):
                self.errors.append(f"pid {old.pid}: still alive after SIGTERM")
            self.agent.gpu_processes(old.uuid)
        except Exception as exc:  # counted, and the run goes on
            self.errors.append(f"pid {old.pid}: {type(exc).__name__}: {exc}"[:300])
            old.popen.kill()
            old.popen.wait(10)
            proc_path(self.node_dir, old.pid).unlink(missing_ok=True)
        self.retired += 1


class Scraper(threading.Thread):
    """The exporter scraped every `every` seconds; the last scrape's series counts."""

    def __init__(self, url: str, every: float) -> None:
        super().__init__(daemon=True)
        self.url, self.every = url, every
        self.series = self.process_series = self.scrapes = self.failures = 0
        self.halt = threading.Event()

    def run(self) -> None:
        session = requests.Session()
        while not self.halt.wait(self.every):
            try:
                text = session.get(self.url, headers={"Accept": PROMETHEUS_ACCEPT}, timeout=10).text
            except requests.RequestException:
                self.failures += 1
                continue
            lines = [line for line in text.splitlines() if line and not line.startswith("#")]
            self.series = len(lines)
            self.process_series = sum(line.startswith("gpu_process_") for line in lines)
            self.scrapes += 1


def _summary(
    samples: list[Sample], components: list[str], warmup: float
) -> dict[str, dict[str, float]]:
    """Over the samples after the warm-up (modules loaded, caches filled once)."""
    samples = [s for s in samples if s.at >= warmup] or samples[-1:]
    tenth = max(1, len(samples) // 10)
    first, last, settled = samples[:tenth], samples[-tenth:], samples
    out: dict[str, dict[str, float]] = {}
    for name in components:
        rss_first = round(statistics.median(s.components[name]["rss_mib"] for s in first), 1)
        rss_last = round(statistics.median(s.components[name]["rss_mib"] for s in last), 1)
        out[name] = {
            "rss_first_mib": rss_first,
            "rss_last_mib": rss_last,
            "rss_growth_pct": round(100 * (rss_last - rss_first) / rss_first, 1),
            "fds_min": min(s.components[name]["fds"] for s in settled),
            "fds_max": max(s.components[name]["fds"] for s in settled),
            "threads_min": min(s.components[name]["threads"] for s in settled),
            "threads_max": max(s.components[name]["threads"] for s in settled),
        }
    per_live = [s.process_series / s.live for s in settled if s.live]
    out["series"] = {
        "per_live_process_min": round(min(per_live), 2),
        "per_live_process_max": round(max(per_live), 2),
        "total_min": min(s.series for s in settled),
        "total_max": max(s.series for s in settled),
    }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="how long (default 30)")
    parser.add_argument("--rate", type=float, default=10.0, help="retirements a second (10)")
    parser.add_argument("--live", type=int, default=64, help="GPU processes kept alive (64)")
    parser.add_argument("--scrape-every", type=float, default=1.0, help="seconds (1)")
    parser.add_argument("--sample-every", type=float, default=30.0, help="seconds (30)")
    parser.add_argument(
        "--warmup", type=float, default=60.0, help="seconds left out of the summary (60)"
    )
    parser.add_argument("--out", type=Path, help="the report as JSON")
    args = parser.parse_args()
    if args.minutes <= 0 or args.rate <= 0 or args.live < 1:
        parser.error("--minutes and --rate must be positive, --live at least 1")

    with tempfile.TemporaryDirectory(prefix="churn-soak-") as tmp:
        soak = Soak(Path(tmp), args.live)
        soak.start_components()
        for _ in range(args.live):
            soak.start_one()
        scraper = Scraper(soak.metrics_url, args.scrape_every)
        scraper.start()
        samples: list[Sample] = []
        began = time.monotonic()
        end = began + args.minutes * 60
        next_sample = began
        try:
            for step in itertools.count():
                now = time.monotonic()
                if now >= end:
                    break
                if now >= next_sample:
                    sample = Sample(
                        round(now - began, 1),
                        soak.retired,
                        len(soak.live),
                        scraper.series,
                        scraper.process_series,
                        {name: _usage(p.pid) for name, p in soak.services.items()},
                    )
                    samples.append(sample)
                    print(
                        f"{sample.at:7.0f}s  retired {sample.retired:6d}  live {sample.live}  "
                        f"series {sample.series} ({sample.process_series} per-process)  "
                        + "  ".join(
                            f"{n}: {c['fds']:.0f} fds {c['threads']:.0f} thr {c['rss_mib']} MiB"
                            for n, c in sample.components.items()
                        ),
                        flush=True,
                    )
                    next_sample += args.sample_every
                soak.retire_oldest()
                soak.start_one()
                # On schedule: a step late is not made up by a burst.
                time.sleep(max(0.0, began + (step + 1) / args.rate - time.monotonic()))
        finally:
            scraper.halt.set()
            soak.stop()
        elapsed = time.monotonic() - began

    summary = _summary(samples, ["exporter", "agent"], args.warmup)
    report = {
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
        ),
        "minutes": round(elapsed / 60, 1),
        "retired": soak.retired,
        "rate_achieved": round(soak.retired / elapsed, 2),
        "hours_at_one_per_second": round(soak.retired / 3600, 2),
        "scrapes": scraper.scrapes,
        "scrape_failures": scraper.failures,
        "errors": soak.errors[:50],
        "error_count": len(soak.errors),
        "summary": summary,
        "samples": [asdict(s) for s in samples],
    }
    print(
        f"\n{report['machine']}; {report['minutes']} min, {soak.retired} processes retired "
        f"({report['rate_achieved']}/s; {report['hours_at_one_per_second']} h of one a "
        f"second), {scraper.scrapes} scrapes ({scraper.failures} failed), "
        f"{len(soak.errors)} errors"
    )
    print("| component | RSS first → last tenth (MiB) | growth | descriptors | threads |")
    print("|---|---|---|---|---|")
    for name in ("exporter", "agent"):
        s = summary[name]
        print(
            f"| {name} | {s['rss_first_mib']} → {s['rss_last_mib']} | {s['rss_growth_pct']} % "
            f"| {s['fds_min']:.0f} to {s['fds_max']:.0f} "
            f"| {s['threads_min']:.0f} to {s['threads_max']:.0f} |"
        )
    series = summary["series"]
    print(
        f"series: {series['total_min']} to {series['total_max']} in all; per live process "
        f"{series['per_live_process_min']} to {series['per_live_process_max']}"
    )
    for error in soak.errors[:10]:
        print("error:", error)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0 if not soak.errors else 1


if __name__ == "__main__":
    sys.exit(main())
