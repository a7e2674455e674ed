"""Benchmark the actuator: webhook ack latency, sustained requests/s, live re-check time.

    python benchmarks/actuator_webhook.py [--quick]

Starts `gpu-reclaimer actuator` (gunicorn, 2 workers, SQLite synchronous=FULL, so every ack
is an fsync'd commit) on a loopback port against a simulated node, and prints a table.
Targets: ack p99 <= 50 ms at 100 alerts, >= 200 req/s, re-check <= 10 ms per target.
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
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actuator.live import target_of  # noqa: E402
from actuator.node import LocalNode  # noqa: E402
from actuator.policy import Protect  # noqa: E402
from exporter.sim.state import init_node, load_node, read_procs  # noqa: E402
from tests.support import free_port, wait_http  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from measure import percentile  # noqa: E402

TOKEN = "bench-token-0123456789"


def alerts_body(n: int) -> bytes:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    alerts = [
        {
            "status": "firing",
            "labels": {
                "alertname": "GpuProcessIdle",
                "reclaim": "true",
                "node": "other-node",
                "pid": str(10000 + i),
                "uuid": "GPU-bench",
                "user": "alice",
            },
            "annotations": {"start_time": "1700000000.0", "summary": "idle GPU process"},
            "startsAt": now,
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=x",
            "fingerprint": uuid.uuid4().hex[:16],
        }
        for i in range(n)
    ]
    return json.dumps(
        {
            "version": "4",
            "groupKey": "{}:{}",
            "truncatedAlerts": 0,
            "status": "firing",
            "receiver": "reclaim",
            "groupLabels": {},
            "commonLabels": {},
            "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093",
            "alerts": alerts,
        }
    ).encode()


def post(conn: http.client.HTTPConnection, body: bytes) -> float:
    started = time.perf_counter()
    conn.request(
        "POST",
        "/api/v1/alerts",
        body=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )
    response = conn.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}")
    return time.perf_counter() - started


def start_actuator(
    work: Path, sim: Path, server: dict[str, Any] | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    (work / "token").write_text(TOKEN)
    (work / "token").chmod(0o600)
    config = {
        "mode": "observe",
        "node": {"name": "bench-node", "sim_dir": str(sim)},
        "server": {
            "listen": f"127.0.0.1:{port}",
            "workers": 2,
            "token_file": str(work / "token"),
            **(server or {}),
        },
        "storage": {"database": str(work / "a.db"), "audit_log": str(work / "audit.jsonl")},
    }
    (work / "actuator.yml").write_text(yaml.safe_dump(config))
    log = (work / "actuator.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter.cli",
            "--log-level",
            "WARNING",
            "actuator",
            "--config",
            str(work / "actuator.yml"),
        ],
        stdout=log,
        stderr=log,
        cwd=ROOT,
        start_new_session=True,
    )
    wait_http(f"http://127.0.0.1:{port}/-/ready")
    return proc, port


def latency(port: int, n_alerts: int, requests: int) -> dict[str, float]:
    bodies = [alerts_body(n_alerts) for _ in range(requests)]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    took = [post(conn, b) for b in bodies]
    return {
        "alerts": n_alerts,
        "requests": requests,
        "p50_ms": statistics.median(took) * 1000,
        "p99_ms": percentile(took, 0.99) * 1000,
    }


def throughput(port: int, seconds: float, clients: int) -> float:
    bodies = [alerts_body(1) for _ in range(4000)]
    count = [0] * clients
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        j = i
        while time.perf_counter() < stop:
            post(conn, bodies[j % len(bodies)])
            count[i] += 1
            j += clients

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(count) / (time.perf_counter() - started)


def recheck(sim: Path, samples: int) -> dict[str, float]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter.cli",
            "sim",
            "run",
            "--dir",
            str(sim),
            "--gpu",
            "0",
            "--memory",
            "4GiB",
            "--phases",
            "idle",
            "--children",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        while not any(p.pid == proc.pid for p in read_procs(sim)):
            time.sleep(0.05)
        time.sleep(0.5)
        target = target_of("bench-node", proc.pid, load_node(sim).gpus[0].uuid)
        node = LocalNode(
            "bench-node", Protect(protect_root=False, protected_uid_below=0), sim_dir=str(sim)
        )
        node.inspect(target)  # warm up (NVML init, protection cache)
        took = []
        for _ in range(samples):
            started = time.perf_counter()
            live = node.inspect(target)
            took.append(time.perf_counter() - started)
            assert live.on_gpu and live.sm_util is not None, live
        return {"p50_ms": statistics.median(took) * 1000, "p99_ms": percentile(took, 0.99) * 1000}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    with tempfile.TemporaryDirectory(prefix="gpu-reclaimer-actuator-bench-") as tmp:
        work = Path(tmp)
        sim = work / "node"
        init_node(sim, gpus=2, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
        proc, port = start_actuator(work, sim)
        results: dict[str, Any] = {}
        try:
            results["latency"] = [
                latency(port, 1, int(300 * scale)),
                latency(port, 100, int(200 * scale)),
                latency(port, 1000, int(40 * scale)),
            ]
            results["throughput_rps"] = throughput(port, 10 * scale, clients=4)
        finally:
            proc.terminate()
            proc.wait(20)
        results["recheck"] = recheck(sim, int(300 * scale))
    print(
        f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}"
    )
    print("webhook ack latency (2 gunicorn workers, SQLite WAL synchronous=FULL):")
    for row in results["latency"]:
        print(
            f"  {row['alerts']:>5} alerts/request: p50 {row['p50_ms']:7.2f} ms  "
            f"p99 {row['p99_ms']:7.2f} ms  ({row['requests']} requests)"
        )
    print(f"sustained: {results['throughput_rps']:.0f} requests/s (1 alert each, 4 clients)")
    r = results["recheck"]
    print(f"live re-check per target: p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms")
    ok = (
        results["latency"][1]["p99_ms"] <= 50
        and results["throughput_rps"] >= 200
        and r["p99_ms"] <= 10
    )
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
