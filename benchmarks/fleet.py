"""Benchmark a central actuator driving a simulated fleet through node agents.

    python benchmarks/fleet.py [--nodes 50] [--gpus 8] [--rounds 3] [--backends sqlite,postgres]

A fleet of NODES simulated nodes x GPUS GPUs, one idle process per GPU (a real `sleep`
process registered on its node's simulated GPU), one agent per node over mutual TLS (50
agents share one process: benchmarks/fleet_agents.py), and one central actuator
(gunicorn, 2 workers, observe mode, so nothing is signalled but every case is re-checked
live through its node's agent and ends `observed`). Each round posts one alert per
process, in Alertmanager-sized groups, to a fresh database, and measures:

  webhook ack      per request (all alerts of a group recorded durably before the answer)
  cases/s          alerts posted -> every case ended, sustained
  case latency     a case's creation -> its end (two live re-checks a CPU window apart)
  bytes/case       the database's growth over the round, per case (x 10,000 in the table);
                   every case keeps its timeline, episode and live evidence
  CPU/case         CPU seconds the actuator (master and workers) and the agents spent per
                   case: on this small machine they share 2 cores, so cases/s is bounded by
                   the simulated agents; the actuator's CPU per case is what sizes a real
                   central actuator (its cases/s per core = 1 / CPU per case)

Rounds alternate the backends (SQLite file; PostgreSQL started here with initdb/pg_ctl),
so both see the same machine state; the table gives medians over rounds.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from measure import percentile  # noqa: E402
from scratch import scratch_dir  # noqa: E402

from exporter.procfs import boot_id, start_ticks  # noqa: E402
from exporter.sim.state import ProcState, init_node, load_node, write_proc  # noqa: E402
from tests.helpers.fleet import client_tls, make_certs  # noqa: E402
from tests.support import free_port, gpu_reclaimer_command, wait_http  # noqa: E402

TOKEN = "bench-token-0123456789"
GROUP = 50  # alerts per webhook request


def start_fleet(base: Path, nodes: int, gpus: int) -> tuple[list[dict[str, Any]], list[Any]]:
    names = [f"gpu-{i:03d}" for i in range(nodes)]
    make_certs(base / "certs", names)
    targets, procs = [], []
    for name in names:
        init_node(base / name, gpus=gpus, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
        for gpu in load_node(base / name).gpus:
            # stdout/stderr to /dev/null: a file written meanwhile would be log activity
            proc = subprocess.Popen(
                ["sleep", "86400"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            procs.append(proc)
            ticks = start_ticks(proc.pid)
            write_proc(
                base / name, ProcState(proc.pid, ticks or 0, gpu.index, 4 * 1024**3, 0, time.time())
            )
            targets.append({"node": name, "pid": proc.pid, "uuid": gpu.uuid, "ticks": ticks})
    procs.extend(start_agents(base, names))
    return targets, procs


def start_agents(base: Path, names: list[str], hosts: int = 1) -> list[subprocess.Popen[str]]:
    """The agents of `names` in `hosts` stand-in processes (benchmarks/fleet_agents.py);
    their URLs in BASE/agents.json, as the actuator's `agents.static` reads them."""
    agents, urls = [], {}
    for host in range(hosts):
        share = names[host::hosts]
        agent = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "fleet_agents.py"), str(base), *share],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert agent.stdout is not None
        ready, _, ports = agent.stdout.readline().partition(" ")
        assert ready == "ready", ready
        agents.append(agent)
        urls.update({n: f"https://127.0.0.1:{p}" for n, p in json.loads(ports).items()})
    (base / "agents.json").write_text(json.dumps(urls))
    return agents


def start_actuator(
    base: Path,
    work: Path,
    database: str,
    parallel: int,
    port: int | None = None,
    intake_first: float | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    port = port or free_port()
    token = work / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    reconciler: dict[str, Any] = {"interval": "0.1s", "parallel": parallel}
    if intake_first is not None:  # else the shipped default
        reconciler["intake_first"] = f"{intake_first}s"
    config = {
        "mode": "observe",
        "node": {"name": "central"},
        "server": {"listen": f"127.0.0.1:{port}", "token_file": str(token), "workers": 2},
        "storage": {"database": database, "audit_log": str(work / "audit.jsonl")},
        "agents": {
            "tls": client_tls(base / "certs"),
            "static": json.loads((base / "agents.json").read_text()),
            "timeout": "5s",
        },
        # the sleepers start idle on purpose, moments before their alerts
        "defaults": {"idle_for": "0s", "min_runtime": "0s"},
        "idle": {"cpu_window": "0.3s", "sm_window": "1s"},
        "protect": {"protect_root": False, "protected_uid_below": 0},
        "breaker": {"min_flagged": 100000},
        "reconciler": reconciler,
    }
    (work / "actuator.yml").write_text(yaml.safe_dump(config))
    log = (work / "actuator.log").open("ab")
    proc = subprocess.Popen(
        [*gpu_reclaimer_command(), "actuator", "--config", str(work / "actuator.yml")],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    wait_http(f"http://127.0.0.1:{port}/-/healthy", 60)
    return proc, port


def alert(t: dict[str, Any], starts: str) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {
            "alertname": "GpuProcessIdle",
            "reclaim": "true",
            "node": t["node"],
            "pid": str(t["pid"]),
            "uuid": t["uuid"],
            "start_ticks": str(t["ticks"]),
            "boot_id": boot_id(),
            "user": "bench",
        },
        "annotations": {},
        "startsAt": starts,
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": uuid.uuid4().hex[:16],
    }


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data) if data else None


def one_round(
    base: Path,
    targets: list[dict[str, Any]],
    backend: str,
    pg: Any,
    parallel: int,
    agents_pid: int,
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"round-{backend}-", dir=base))
    database = str(work / "actuator.db") if backend == "sqlite" else pg.new_database()
    proc, port = start_actuator(base, work, database, parallel)
    agents = psutil.Process(agents_pid)
    cpu0 = _cpu(psutil.Process(proc.pid)), _cpu(agents)
    try:
        empty = _size(database, work, backend)
        starts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
        acks = []
        t0 = time.monotonic()
        for i in range(0, len(targets), GROUP):
            body = {
                "version": "4",
                "status": "firing",
                "receiver": "reclaim",
                "groupLabels": {},
                "commonLabels": {},
                "commonAnnotations": {},
                "externalURL": "http://am",
                "groupKey": f"bench{i}",
                "truncatedAlerts": 0,
                "alerts": [alert(t, starts) for t in targets[i : i + GROUP]],
            }
            s = time.monotonic()
            status, _ = request(port, "POST", "/api/v1/alerts", json.dumps(body).encode())
            acks.append(time.monotonic() - s)
            assert status == 200, status
        posted = time.monotonic() - t0
        deadline = time.monotonic() + 600
        while True:
            _, listed = request(port, "GET", f"/api/v1/cases?limit={len(targets) + 10}")
            cases = listed["cases"]
            if len(cases) >= len(targets) and all(c["state"] == "observed" for c in cases):
                break
            ended = [c for c in cases if c["state"] not in ("pending", "deferred")]
            if len(ended) >= len(targets):
                states = sorted({f"{c['state']}: {c['reason'][:60]}" for c in ended})
                raise SystemExit(f"{backend}: cases ended otherwise than observed: {states[:5]}")
            if time.monotonic() > deadline:
                states = sorted({c["state"] for c in cases})
                raise SystemExit(f"{backend}: cases did not all end: {len(cases)} {states}")
            time.sleep(0.25)
        took = time.monotonic() - t0
        latencies = [c["ended_at"] - c["created"] for c in cases]
        size = _size(database, work, backend) - empty
        actuator_cpu = _cpu(psutil.Process(proc.pid)) - cpu0[0]
        agents_cpu = _cpu(agents) - cpu0[1]
        return {
            "backend": backend,
            "cases": len(cases),
            "ack_p50": percentile(acks, 0.5),
            "ack_p99": percentile(acks, 0.99),
            "posted_s": posted,
            "cases_per_s": len(cases) / took,
            "latency_p50": percentile(latencies, 0.5),
            "latency_p99": percentile(latencies, 0.99),
            "bytes_per_case": size / len(cases),
            "actuator_cpu_per_case": actuator_cpu / len(cases),
            "agents_cpu_per_case": agents_cpu / len(cases),
        }
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def _cpu(process: psutil.Process) -> float:
    """CPU seconds of a process and its children (gunicorn's workers)."""
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def _size(database: str, work: Path, backend: str) -> int:
    if backend == "sqlite":
        return sum(f.stat().st_size for f in work.glob("actuator.db*"))
    import psycopg

    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
        ).fetchone()
    return int(row[0])


def main() -> int:
    # `kill` or Ctrl-C: still stop the actuator, the agents and the sleepers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--nodes", type=int, default=50, help="simulated nodes, an agent each")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node, an idle process each")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per backend")
    parser.add_argument(
        "--backends", default="sqlite,postgres", help="stores, comma-separated, interleaved"
    )
    parser.add_argument("--parallel", type=int, default=8, help="reconciler.parallel")
    args = parser.parse_args()
    backends = args.backends.split(",")
    base = scratch_dir("gpu-reclaimer-fleet-")
    base.chmod(0o755)
    print(
        f"# {args.nodes} nodes x {args.gpus} GPUs, {platform.node()}: "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        flush=True,
    )
    targets, procs = start_fleet(base, args.nodes, args.gpus)
    pg_ctx = None
    pg = None
    if "postgres" in backends:
        from actuator.demo.postgres import postgres_server

        pg_ctx = postgres_server(base / "postgres")
        pg = pg_ctx.__enter__()
    results: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            for backend in backends:  # interleaved
                result = one_round(base, targets, backend, pg, args.parallel, procs[-1].pid)
                results.append(result)
                print(
                    f"round {r + 1} {backend}: "
                    + json.dumps(
                        {k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}
                    ),
                    flush=True,
                )
    finally:
        if pg_ctx is not None:
            pg_ctx.__exit__(None, None, None)
        for p in procs:
            p.kill()
    print()
    print(
        "| backend | cases | webhook ack p50 / p99 (50 alerts) | cases/s | case latency p50 / p99 "
        "| actuator CPU per case | agents CPU per case | DB per 10,000 cases |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for backend in backends:
        rows = [r for r in results if r["backend"] == backend]

        def med(key: str, rows: list[dict[str, Any]] = rows) -> float:
            return statistics.median(r[key] for r in rows)

        print(
            f"| {backend} | {rows[0]['cases']} | {med('ack_p50') * 1000:.0f} / "
            f"{med('ack_p99') * 1000:.0f} ms | {med('cases_per_s'):.1f} | "
            f"{med('latency_p50'):.1f} / {med('latency_p99'):.1f} s | "
            f"{med('actuator_cpu_per_case') * 1000:.0f} ms | "
            f"{med('agents_cpu_per_case') * 1000:.0f} ms | "
            f"{med('bytes_per_case') * 10000 / 2**20:.0f} MiB |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
