"""Pure: what an evidence picture asks Prometheus, panel by panel.

Each panel is an input of the idle rule computed the way the rule computes it
(alert-rules/gpu-reclaimer.rules.yml): the same function over the same window (`[1m]`, read
from the rules file with the thresholds), on the exporter's own series, so a picture works
wherever the exporter is scraped, and each threshold is the one the rule compares with.
Where the rules also run in that Prometheus, the time `gpu_process:idle_condition` held is
shaded. Series are selected by the GPU's UUID and the PID the node proved for the case
(never by an alert's labels); the picture starts no earlier than the process did, so an
earlier process that had the same PID on that GPU is not drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from exporter.thresholds import Thresholds

Unit = Literal["ratio", "bytes", "cores", "writes"]
# Where the rule held (gpu_process:idle_condition): shaded behind every panel.
IDLE_CONDITION = "gpu_process:idle_condition"


@dataclass(frozen=True)
class Panel:
    title: str
    query: str
    unit: Unit
    threshold: float | None = None  # the rule's limit: at or below it counts as idle


@dataclass(frozen=True)
class Subject:
    """The process a picture is of, as the node proved it."""

    gpu_uuid: str
    pid: int
    start_time: float  # unix seconds; the picture begins no earlier


def selector(subject: Subject) -> str:
    """The label matchers for one process's series (values quoted for PromQL)."""
    return f'{{uuid="{_quoted(subject.gpu_uuid)}", pid="{int(subject.pid)}"}}'


def panels(subject: Subject, thresholds: Thresholds) -> tuple[Panel, ...]:
    at, w = selector(subject), thresholds.sample_window

    def liveness(metric: str, signal: str) -> str:
        return f'label_replace(changes({metric}{at}[{w}]), "signal", "{signal}", "", "")'

    return (
        Panel(
            f"SM utilisation (highest in each {w} window)",
            f"max_over_time(gpu_process_sm_utilization_ratio{at}[{w}])",
            "ratio",
            thresholds.max_sm_util,
        ),
        Panel("GPU memory held", f"gpu_process_memory_used_bytes{at}", "bytes"),
        Panel(
            "Process-tree CPU",
            f"rate(gpu_process_cpu_seconds_total{at}[{w}])",
            "cores",
            thresholds.max_cpu_cores,
        ),
        Panel(
            f"Heartbeat and log writes (per {w} window)",
            "sum by (pid) ("
            + liveness("gpu_process_heartbeat_timestamp_seconds", "heartbeat")
            + " or "
            + liveness("gpu_process_log_write_timestamp_seconds", "log")
            + ")",
            "writes",
            0.0,
        ),
    )


def idle_query(subject: Subject) -> str:
    return f"{IDLE_CONDITION}{selector(subject)}"


def window(subject: Subject, now: float, span: float) -> tuple[float, float]:
    """The picture's time range: the last `span` seconds, from the process's start at the
    earliest, in whole seconds rounded up. The Prometheus client sends whole seconds
    (rounded to the nearest): an end rounded down could fall before a sample scraped in the
    last half second, the only one a new process has, and the picture would read as "no
    series"; a start rounded down could fall before the process began."""
    return float(math.ceil(max(now - span, subject.start_time))), float(math.ceil(now))


def step_for(start: float, end: float, points: int = 240) -> float:
    """About `points` samples across the range (a second apart at the finest)."""
    return max(1.0, (end - start) / points)


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
