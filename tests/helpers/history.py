"""A known history of raw exporter series for the backtest and tune tests: four processes
on two GPUs, whose utilisation over two hours is given minute by minute (OpenMetrics, for
`promtool tsdb create-blocks-from openmetrics`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.helpers.prom import Server, backfilled_prometheus

GiB = 1024**3
INSTANCE = 'instance="n1:9838",job="gpu-exporter"'
OFFSET = 7  # samples 7 s off the minute: none sits on a 60 s step
M = 60
# pid: (gpu, user, memory GiB, util(t - start)); every process lives the whole history.
PROCESSES: dict[int, tuple[int, str, int, Callable[[int], float]]] = {
    # idle (util 0) from minute 10 to 70: both rule sets flag it
    100: (0, "alice", 4, lambda t: 0.0 if 10 * M <= t < 70 * M else 0.9),
    # util 15 % over the same hour: idle only with a 20 % threshold
    200: (1, "bob", 2, lambda t: 0.15 if 10 * M <= t < 70 * M else 0.9),
    # idle for 20 minutes (80 to 100): flagged with for: 5m, not with for: 30m
    400: (1, "dave", 8, lambda t: 0.0 if 80 * M <= t < 100 * M else 0.9),
    300: (0, "carol", 1, lambda t: 0.5),  # never idle
}


def _samples(
    name: str, labels: str, value: Callable[[int], float] | float, start: int, end: int
) -> list[str]:
    return [
        f"{name}{{{labels}}} {value(t - start) if callable(value) else value} {t}"
        for t in range(start - 10 * M + OFFSET, end, 15)
    ]


def history(start: int, end: int) -> str:
    families: dict[str, tuple[str, list[str]]] = {}

    def add(name: str, kind: str, labels: str, value: Callable[[int], float] | float) -> None:
        families.setdefault(name, (kind, []))[1].extend(_samples(name, labels, value, start, end))

    add("up", "gauge", INSTANCE, 1)
    add("gpu_exporter_nvml_up", "gauge", INSTANCE, 1)
    for g in (0, 1):
        gpu = f'{INSTANCE},gpu="{g}",uuid="GPU-{g}"'
        add("gpu_memory_total_bytes", "gauge", gpu, 80 * GiB)
        add("gpu_exporter_device_up", "gauge", gpu, 1)
    for pid, (g, user, memory, util) in PROCESSES.items():
        proc = f'{INSTANCE},gpu="{g}",uuid="GPU-{g}",pid="{pid}"'
        add(
            "gpu_process_info",
            "gauge",
            f'{proc},node="n1",user="{user}",project="p-{user}",command="python",'
            f'start_ticks="{pid}00",boot_id="b1"',
            1,
        )
        add("gpu_process_memory_used_bytes", "gauge", proc, memory * GiB)
        add("gpu_process_sm_utilization_ratio", "gauge", proc, util)
        add("gpu_process_cpu_seconds", "counter", proc, 100.0)
        add("gpu_process_start_time_seconds", "gauge", proc, float(start - 86400))
    lines = []
    for name, (kind, samples) in families.items():
        lines.append(f"# TYPE {name} {kind}")
        metric = f"{name}_total" if kind == "counter" else name
        lines += [line.replace(name, metric, 1) for line in samples]
    return "\n".join(lines) + "\n# EOF\n"


@contextlib.contextmanager
def backfilled_history(work: Path) -> Iterator[tuple[Server, int]]:
    """A real Prometheus holding `history` over two hours that began a day ago, on the
    hour: (the server, the start)."""
    start = (int(time.time()) // 3600 - 24) * 3600
    with backfilled_prometheus(work, history(start, start + 120 * M)) as prom:
        yield prom, start
