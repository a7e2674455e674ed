"""What naming pods costs: the kubelet's pod-resources List, over its unix socket, as the
exporter and the live re-check call it (exporter/kube/pod_resources.py).

    python benchmarks/pod_resources.py [--pods 110,250,500] [--rounds 200]

The kubelet is the gRPC stand-in of tests/helpers/kube.py (the published proto, a Python
server): the figures bound the client's share (channel, decoding, building the GPU ->
pod table) plus a Python server's; a real kubelet (Go) answers at least as fast. 110 pods
is the kubelet's default maximum; each pod here holds one GPU of a 8-GPU node, sliced.
Reported: median and p99 of a fresh List (what each live re-check of a pod process pays)
and of a cached `locate` (what a scrape pays for a new process), interleaved per round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter.kube.pod_resources import PodResources  # noqa: E402
from tests.helpers.kube import Kubelet, PodSpec  # noqa: E402


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"median {statistics.median(ordered) * 1000:.3f} ms, p99 {p99 * 1000:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="110,250,500")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    gpus = [f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(8)]
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(n) for n in args.pods.split(",")):
            socket_path = Path(tmp) / f"kubelet-{count}.sock"
            with Kubelet(socket_path) as kubelet:
                kubelet.pods = [
                    PodSpec(f"ns-{i % 20}", f"pod-{i}", "main", [f"{gpus[i % 8]}::{i}"], "n")
                    for i in range(count)
                ]
                client = PodResources(socket_path, refresh=3600)
                client.holders(fresh=True)  # connect once
                fresh, cached = [], []
                for _ in range(args.rounds):
                    start = time.perf_counter()
                    client.holders(fresh=True)
                    fresh.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    client.locate(gpus[3])
                    cached.append(time.perf_counter() - start)
                client.close()
            print(f"{count:4d} pods: List {_ms(fresh)}; cached locate {_ms(cached)}")


if __name__ == "__main__":
    main()
