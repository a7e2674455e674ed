"""The exporter on a real NVIDIA driver: raw NVML call cost, the exporter against it and
against nvitop-exporter, and a GPU's idle power empty and holding memory. One prepared
script, run once on a machine with a GPU; it changes nothing on the machine and leaves no
process behind.

    python benchmarks/real_gpu.py [--holders 8] [--hold-gib 2] [--scrapes 60]
        [--nvitop-venv DIR] [--power-seconds 20] [--out FILE.json]

Steps, each printed as it ends (a step that cannot run says why and the others go on):

  card        driver, CUDA driver version, each GPU's name and memory
  nvml calls  the calls a collection makes (memory, utilisation, running processes,
              per-process utilisation, power), each timed 200 times per GPU: median and
              p99 in µs, and one collection's NVML time per GPU
  power       GPU 0's board power with no process on it, then with one process holding
              --hold-gib of device memory and doing nothing (a CUDA context made through
              libcuda with ctypes: no framework needed), medians over --power-seconds
  exporters   --holders idle CUDA processes spread over the GPUs (the abandoned kernels
              the product exists for), then `gpu-reclaimer exporter` on the real driver and,
              with --nvitop-venv (a venv with nvitop-exporter installed: the benchmark
              machine may have no network), nvitop-exporter side by side, scraped in turn
              once a second: CPU per collection, scrape latency p50/p99, server p99
              (our `gpu_exporter_scrape_duration_seconds`), RSS, and whether both list the
              same PIDs
  suspend     with --suspend 8,40: processes of those sizes suspended and resumed through
              the CUDA driver's checkpoint API, each step timed, the GPU's memory while
              suspended, the memory compared after the restore, and a restore into a full
              GPU, a restore onto a second GPU of the chip where there is one, and (as
              root) which asker the driver lets checkpoint another user's process
              (benchmarks/gpu_suspend.py)

Exits 2 where no NVIDIA driver answers (nothing measured: docs/performance.md says the
figures are missing). The figures go to docs/performance.md with the card's name.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from exporter_scrape import Exporter, start_exporter  # noqa: E402
from exporter_vs_nvitop import start_nvitop  # noqa: E402
from gpu_suspend import stop  # noqa: E402
from measure import percentile  # noqa: E402
from scratch import scratch_dir  # noqa: E402

GiB = 1024**3


def hold(gpu: int, gib: float) -> None:
    """A process that makes a CUDA context on `gpu`, allocates `gib` and sleeps: what an
    abandoned notebook kernel looks like to the driver. Prints `held` once it holds."""
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(result: int, what: str) -> None:
        if result != 0:
            raise SystemExit(f"{what} failed: CUresult {result}")

    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), gpu), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
    pointer = ctypes.c_uint64()
    if gib > 0:
        check(
            cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(int(gib * GiB))), "cuMemAlloc"
        )
    print("held", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


def start_holder(gpu: int, gib: float) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--hold", f"{gpu}:{gib}"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != "held":
        process.kill()
        raise RuntimeError(f"a CUDA holder on GPU {gpu} did not start ({line or 'no output'})")
    return process


def timed(call: Callable[[], object], repeat: int = 200) -> tuple[float, float]:
    """Median and p99 of one call, in µs (an NVML error counts: it is what a collection pays)."""
    took = []
    for _ in range(repeat):
        started = time.perf_counter()
        with contextlib.suppress(Exception):  # NOT_SUPPORTED and the like cost the call too
            call()
        took.append(time.perf_counter() - started)
    return 1e6 * statistics.median(took), 1e6 * percentile(took, 0.99)


def card(nvml: Any) -> dict[str, Any]:
    count = nvml.nvmlDeviceGetCount()
    gpus = []
    for index in range(count):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append(
            {
                "index": index,
                "name": nvml.nvmlDeviceGetName(handle),
                "memory_gib": nvml.nvmlDeviceGetMemoryInfo(handle).total / GiB,
            }
        )
    return {
        "driver": nvml.nvmlSystemGetDriverVersion(),
        "cuda_driver": nvml.nvmlSystemGetCudaDriverVersion(),
        "gpus": gpus,
    }


def nvml_calls(nvml: Any) -> dict[str, Any]:
    calls: dict[str, Callable[[Any], object]] = {
        "nvmlDeviceGetMemoryInfo": nvml.nvmlDeviceGetMemoryInfo,
        "nvmlDeviceGetUtilizationRates": nvml.nvmlDeviceGetUtilizationRates,
        "nvmlDeviceGetComputeRunningProcesses": nvml.nvmlDeviceGetComputeRunningProcesses,
        "nvmlDeviceGetProcessUtilization": lambda h: nvml.nvmlDeviceGetProcessUtilization(h, 0),
        "nvmlDeviceGetPowerUsage": nvml.nvmlDeviceGetPowerUsage,
    }
    found: dict[str, Any] = {}
    per_collection = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        total = 0.0
        for name, call in calls.items():
            median, p99 = timed(lambda call=call, handle=handle: call(handle))  # type: ignore[misc]
            found.setdefault(name, []).append({"gpu": index, "median_us": median, "p99_us": p99})
            total += median
        per_collection.append(total)
    found["collection_us_per_gpu"] = statistics.median(per_collection)
    return found


def power(nvml: Any, seconds: float, gib: float) -> dict[str, float]:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)

    def watts() -> float:
        samples = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            samples.append(nvml.nvmlDeviceGetPowerUsage(handle) / 1000)
            time.sleep(0.5)
        return statistics.median(samples)

    if nvml.nvmlDeviceGetComputeRunningProcesses(handle):
        raise RuntimeError("GPU 0 already runs a process: its empty power cannot be measured")
    empty = watts()
    holder = start_holder(0, gib)
    try:
        time.sleep(2)
        held = watts()
    finally:
        stop([holder])
    return {"empty_w": empty, "holding_w": held, "held_gib": gib, "seconds": seconds}


def exporters(
    holders: int, gib: float, scrapes: int, nvitop_venv: Path | None, gpus: int
) -> dict[str, Any]:
    held = []
    running: list[subprocess.Popen[Any]] = []
    workdir = scratch_dir("gpu-reclaimer-real-gpu-")
    (workdir / "hb").mkdir()
    try:
        for i in range(holders):
            held.append(start_holder(i % gpus, gib))
        measured = [start_exporter("gpu-reclaimer exporter", None, workdir, REPO)]
        running.append(measured[0].process)
        if nvitop_venv is not None:
            theirs, url = start_nvitop(nvitop_venv, None, 1.0)
            running.append(theirs)
            measured.append(Exporter("nvitop-exporter", theirs, url))
        session = requests.Session()
        for _ in range(5):  # warm both
            for e in measured:
                e.scrape(session)
        for e in measured:
            e.client.clear()
            e.server.clear()
            e.cpu = 0.0
        nvitop_cpu0 = sum(psutil.Process(running[-1].pid).cpu_times()[:2]) if nvitop_venv else 0.0
        started = time.monotonic()
        for i in range(scrapes):
            for e in measured if i % 2 == 0 else measured[::-1]:
                e.scrape(session)
            time.sleep(1.0)
        elapsed = time.monotonic() - started
        holder_pids = {p.pid for p in held}
        result: dict[str, Any] = {"holders": holders, "hold_gib": gib, "scrapes": scrapes}
        for e in measured:
            cpu = e.cpu / scrapes
            if e.label == "nvitop-exporter":
                # nvitop collects every --interval in the background, not at the scrape
                total = sum(psutil.Process(e.process.pid).cpu_times()[:2]) - nvitop_cpu0
                cpu = total / max(1.0, elapsed / 1.0)
            listed = {int(p) for p in re.findall(r'pid="(\d+)"', session.get(e.url).text)}
            result[e.label] = {
                "cpu_ms_per_collection": 1000 * cpu,
                "client_p50_ms": 1000 * percentile(e.client, 0.5),
                "client_p99_ms": 1000 * percentile(e.client, 0.99),
                "server_p99_ms": 1000 * percentile(e.server, 0.99) if e.server else None,
                "rss_mb": psutil.Process(e.process.pid).memory_info().rss / 1e6,
                "lists_every_holder": holder_pids <= listed,
            }
        if nvitop_venv is not None:
            result["cpu_ratio"] = (
                result["gpu-reclaimer exporter"]["cpu_ms_per_collection"]
                / result["nvitop-exporter"]["cpu_ms_per_collection"]
            )
        return result
    finally:
        stop(running)
        stop(held)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold", help=argparse.SUPPRESS)  # GPU:GIB, the holder's own mode
    parser.add_argument("--holders", type=int, default=8, help="idle CUDA processes")
    parser.add_argument("--hold-gib", type=float, default=2.0, help="memory each holds")
    parser.add_argument("--scrapes", type=int, default=60)
    parser.add_argument("--power-seconds", type=float, default=20.0)
    parser.add_argument("--nvitop-venv", type=Path, help="a venv with nvitop-exporter")
    parser.add_argument(
        "--suspend",
        metavar="GIB,GIB",
        help="also suspend and resume processes of these sizes through the CUDA driver's "
        "checkpoint API (benchmarks/gpu_suspend.py; driver 570+), e.g. 8,40",
    )
    parser.add_argument("--out", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args()
    if args.hold:
        gpu, gib = args.hold.split(":")
        hold(int(gpu), float(gib))
        return 0
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception as error:
        print(
            f"real_gpu: no NVIDIA driver answers here ({error}); nothing measured", file=sys.stderr
        )
        return 2
    figures: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
    }
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("card", lambda: card(nvml)),
        ("nvml calls", lambda: nvml_calls(nvml)),
        ("power", lambda: power(nvml, args.power_seconds, args.hold_gib)),
        (
            "exporters",
            lambda: exporters(
                args.holders,
                args.hold_gib,
                args.scrapes,
                args.nvitop_venv,
                nvml.nvmlDeviceGetCount(),
            ),
        ),
    ]
    if args.suspend:
        from gpu_suspend import run as suspend_runs

        sizes = [float(size) for size in args.suspend.split(",") if size]
        as_root = os.geteuid() == 0  # the privilege probe drops root's capabilities
        steps.append(("suspend", lambda: suspend_runs(0, sizes, privileged=as_root)))
    for name, step in steps:
        print(f"== {name}", flush=True)
        try:
            figures[name] = step()
        except Exception as error:
            figures[name] = {"not measured": str(error)}
        print(json.dumps(figures[name], indent=1, default=str), flush=True)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
