"""Slow clients: can idle or trickling connections starve the webhook or the scrape?

Opens N idle connections (connected, nothing sent) and N trickling ones (a request line,
then one header byte every few seconds, never finishing), then measures legitimate
requests next to them: webhook acks (each an fsync'd SQLite commit) against the actuator,
for each gunicorn worker class, and scrapes against the exporter, compared with the same
requests on a quiet server. Targets: webhook p99 <= 100 ms, scrape <= 2x its quiet time.

    python benchmarks/slow_clients.py [--connections 500] [--requests 200]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from actuator_webhook import alerts_body, start_actuator  # noqa: E402
from measure import percentile  # noqa: E402

from exporter.sim.state import init_node  # noqa: E402
from tests.support import free_port, wait_http  # noqa: E402

TOKEN_HEADER = {"Content-Type": "application/json"}


class SlowClients:
    """`count` idle and `count` trickling connections to 127.0.0.1:`port`."""

    def __init__(self, port: int, count: int, every: float = 2.0) -> None:
        self.port = port
        self.count = count
        self.every = every
        self.idle: list[socket.socket] = []
        self.trickling: list[socket.socket] = []
        self.stop = threading.Event()
        self.refused = 0

    def _connect(self) -> socket.socket | None:
        try:
            return socket.create_connection(("127.0.0.1", self.port), timeout=5)
        except OSError:
            self.refused += 1
            return None

    def open(self) -> SlowClients:
        for _ in range(self.count):
            for group in (self.idle, self.trickling):
                s = self._connect()
                if s is not None:
                    group.append(s)
        for s in self.trickling:
            with contextlib.suppress(OSError):
                s.sendall(b"POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\n")
        threading.Thread(target=self._trickle, daemon=True).start()
        return self

    def _trickle(self) -> None:
        while not self.stop.wait(self.every):
            for s in list(self.trickling):
                try:
                    s.send(b"X")
                except OSError:
                    self.trickling.remove(s)

    def close(self) -> None:
        self.stop.set()
        for s in self.idle + self.trickling:
            s.close()


def timed(
    port: int,
    requests: int,
    pause: float,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, float]:
    """`requests` requests, each on a new connection, `pause` s apart; 200 = success."""
    took, failed = [], 0
    for _ in range(requests):
        started = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            response.read()
            conn.close()
            if response.status != 200:
                failed += 1
                continue
        except OSError:
            failed += 1
            continue
        took.append(time.perf_counter() - started)
        time.sleep(pause)
    return summary(took, failed)


def webhooks(port: int, token: str, requests: int) -> dict[str, float]:
    headers = {**TOKEN_HEADER, "Authorization": f"Bearer {token}"}
    return timed(port, requests, 0.02, "POST", "/api/v1/alerts", alerts_body(1), headers)


def scrapes(port: int, requests: int) -> dict[str, float]:
    return timed(port, requests, 0.05, "GET", "/metrics", headers={"Accept-Encoding": "gzip"})


def summary(took: list[float], failed: int) -> dict[str, float]:
    if not took:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "failed": failed}
    return {
        "p50_ms": statistics.median(took) * 1000,
        "p99_ms": percentile(took, 0.99) * 1000,
        "failed": failed,
    }


def start_exporter(sim: Path, work: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    log = (work / "exporter.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter.cli",
            "--log-level",
            "WARNING",
            "exporter",
            "--sim-dir",
            str(sim),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
        cwd=ROOT,
        start_new_session=True,
    )
    wait_http(f"http://127.0.0.1:{port}/metrics")
    return proc, port


def row(label: str, r: dict[str, float]) -> str:
    return (
        f"  {label:<34} p50 {r['p50_ms']:8.2f} ms  p99 {r['p99_ms']:8.2f} ms  "
        f"failed {int(r['failed'])}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=500, help="idle AND trickling each")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--worker-class",
        action="append",
        choices=["asgi", "sync"],
        help="actuator worker classes to compare (default: both)",
    )
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    classes = args.worker_class or ["asgi", "sync"]
    ok = True
    print(
        f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()}; {args.connections} idle + {args.connections} trickling "
        "connections"
    )
    with tempfile.TemporaryDirectory(prefix="gpu-reclaimer-slow-") as tmp:
        work = Path(tmp)
        sim = work / "node"
        init_node(sim, gpus=2, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
        from actuator_webhook import TOKEN

        for worker_class in classes:
            run = work / worker_class
            run.mkdir()
            proc, port = start_actuator(run, sim, server={"worker_class": worker_class})
            try:
                quiet = webhooks(port, TOKEN, args.requests)
                slow = SlowClients(port, args.connections).open()
                try:
                    time.sleep(1)
                    loaded = webhooks(port, TOKEN, args.requests)
                finally:
                    slow.close()
            finally:
                proc.terminate()
                proc.wait(30)
            print(f"actuator webhook, worker_class={worker_class}:")
            print(row("quiet", quiet))
            print(row("beside the slow clients", loaded))
            met = loaded["failed"] == 0 and loaded["p99_ms"] <= 100
            print(f"  target (p99 <= 100 ms, none failed): {'met' if met else 'MISSED'}")
            ok &= met or worker_class != "asgi"
        proc, port = start_exporter(sim, work)
        try:
            quiet = scrapes(port, args.requests // 2)
            slow = SlowClients(port, args.connections).open()
            try:
                time.sleep(1)
                loaded = scrapes(port, args.requests // 2)
            finally:
                slow.close()
        finally:
            proc.terminate()
            proc.wait(30)
        print("exporter scrape:")
        print(row("quiet", quiet))
        print(row("beside the slow clients", loaded))
        met = loaded["failed"] == 0 and loaded["p99_ms"] <= 2 * max(quiet["p99_ms"], 1.0)
        print(f"  target (p99 <= 2x quiet p99, none failed): {'met' if met else 'MISSED'}")
        ok &= met
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
