"""Webhook soak: a steady 50 requests/s for 10 minutes against a 2-worker actuator.

Each request carries one alert (a new episode, an fsync'd SQLite commit), sent on a fixed
schedule from 4 client threads (open loop: a slow answer does not slow the offered load).
Reports ack latency percentiles per minute and overall, non-2xx answers, and worker
timeouts in the actuator's log. Target (reliability case 44): p99 < 200 ms, no 5xx, no
worker timeout.

    python benchmarks/webhook_soak.py [--rate 50] [--minutes 10] [--worker-class asgi]
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from actuator_webhook import TOKEN, alerts_body, start_actuator  # noqa: E402
from measure import percentile  # noqa: E402

from exporter.sim.state import init_node  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--worker-class", default="asgi", choices=["asgi", "sync"])
    args = parser.parse_args()
    clients = 4
    total = int(args.rate * args.minutes * 60)
    results: list[tuple[float, float, int]] = []  # (offset s, latency s, status)
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="gpu-reclaimer-soak-") as tmp:
        work = Path(tmp)
        sim = work / "node"
        init_node(sim, gpus=2, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
        proc, port = start_actuator(work, sim, server={"worker_class": args.worker_class})
        start = time.perf_counter() + 0.5

        def client(index: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            for n in range(index, total, clients):
                due = start + n / args.rate
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                body = alerts_body(1)
                try:
                    headers = {
                        "Content-Type": "application/json",
                        "Authorization": f"Bearer {TOKEN}",
                    }
                    conn.request("POST", "/api/v1/alerts", body=body, headers=headers)
                    response = conn.getresponse()
                    response.read()
                    status = response.status
                except OSError:
                    status = 0
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                # Latency from when the request was due: queueing in the client counts.
                done = time.perf_counter()
                with lock:
                    results.append((due - start, done - due, status))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        proc.terminate()
        proc.wait(30)
        log = (work / "actuator.log").read_text(errors="replace")
    timeouts = log.count("WORKER TIMEOUT")
    print(
        f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()}; worker_class={args.worker_class}, 2 workers, "
        f"{args.rate:g} req/s for {args.minutes:g} min ({total} requests)"
    )
    by_minute: dict[int, list[float]] = {}
    for offset, latency, _ in results:
        by_minute.setdefault(int(offset // 60), []).append(latency)
    for minute, values in sorted(by_minute.items()):
        p50, p99 = statistics.median(values) * 1000, percentile(values, 0.99) * 1000
        print(
            f"  minute {minute + 1:>2}: p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  "
            f"max {max(values) * 1000:7.2f} ms"
        )
    latencies = [lat for _, lat, _ in results]
    bad = sum(1 for _, _, status in results if not 200 <= status < 300)
    p99 = percentile(latencies, 0.99) * 1000
    print(
        f"overall: p50 {statistics.median(latencies) * 1000:.2f} ms  p99 {p99:.2f} ms  "
        f"p99.9 {percentile(latencies, 0.999) * 1000:.2f} ms  non-2xx {bad}  "
        f"worker timeouts {timeouts}"
    )
    ok = p99 < 200 and bad == 0 and timeouts == 0
    print("target met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
