"""What the fleet wasted and what reclamation saved, over a period, from Prometheus.

Figures come from the series the exporter, the rules and the actuator already record:

- average GPU utilisation: `avg_over_time(gpu_utilization_ratio[period])`, averaged over GPUs;
- idle time: `gpu_process:idle_condition` or `gpu_process:stalled_condition` (the rules'
  own definitions of a process that holds a GPU without working, idle or hung, as the
  dashboards' idle panels count it; the value is the memory the process holds), read with a
  range query at a fixed step as
  `last_over_time(...[step])`, so a series counts only for the steps it was recorded in (no
  5-minute look-back);
  idle process-hours, idle memory GiB-hours, and idle GPU-hours (steps in which at least
  one idle process held the GPU), per user, project and node (from `gpu_process_info`);
- reclaimed: the actuator's counters `gpu_released_success_total` and
  `gpu_memory_freed_bytes_total` (kept in its store, so they never reset on a restart) at the
  period's end less their value before it began: exact counts, never `increase()`'s
  extrapolated fractions ("3.02 reclaims"); `increase()` only where a counter went back
  (a store started afresh);
- idle energy: `gpu_process:idle_power_watts` (the GPU's board power shared among its
  processes by memory held, while the process is idle), integrated step by step like idle
  time, in kWh;
- cost: idle GPU-hours x the price per GPU-hour given, and idle kWh x the price per kWh;
- idle services: `gpu_process:service_idle_condition` (a service that served nothing: no data
  beyond keep-alive, no SM work), counted like idle time into the GPU-hours services held
  while serving nothing, per owner. Services are not warned for it (docs/actuator.md): this
  line is how their owners hear of it.

`build()` takes any object with prometheus-api-client's `custom_query` and
`custom_query_range`; the command (actuator/tools/report_cli.py) passes a `PrometheusConnect`.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from actuator.prometheus_api import PrometheusQueries
from exporter.units import format_duration

MAX_POINTS = 10_000  # Prometheus refuses range queries of more than 11,000 points
MIN_STEP = 60.0
GiB = 1024**3

# Held and not working: the rules' idle or stalled condition (a hung job wastes its GPU as
# an idle one does), as the dashboards' idle panels count it. Both values are the memory held.
IDLE_BY_PROCESS = (
    "max by (instance, gpu, uuid, pid) (last_over_time(gpu_process:idle_condition[{step}s])"
    " or last_over_time(gpu_process:stalled_condition[{step}s]))"
    " * on (instance, gpu, uuid, pid) group_left (node, user, project)"
    " max by (instance, gpu, uuid, pid, node, user, project)"
    " (last_over_time(gpu_process_info[{step}s]))"
)
IDLE_POWER_BY_PROCESS = (
    "max by (instance, gpu, uuid, pid) (last_over_time(gpu_process:idle_power_watts[{step}s]))"
    " * on (instance, gpu, uuid, pid) group_left (node, user, project)"
    " max by (instance, gpu, uuid, pid, node, user, project)"
    " (last_over_time(gpu_process_info[{step}s]))"
)
SERVICE_IDLE_BY_PROCESS = (
    "max by (instance, gpu, uuid, pid)"
    " (last_over_time(gpu_process:service_idle_condition[{step}s]))"
    " * on (instance, gpu, uuid, pid) group_left (node, user, project)"
    " max by (instance, gpu, uuid, pid, node, user, project)"
    " (last_over_time(gpu_process_info[{step}s]))"
)
AVG_UTILISATION = "avg(avg_over_time(gpu_utilization_ratio[{range}s]))"
# The sample times of the GPU series, per step: where in the period data exists at all.
COVERAGE = "min(timestamp(gpu_info))"
GPU_SERIES = "count(count by (instance, gpu, uuid) (count_over_time(gpu_info[{range}s])))"
RECLAIMS = "gpu_released_success_total"
FREED = "gpu_memory_freed_bytes_total"
# A counter's last value within the period, and its last value before the period began.
AT_END = "sum(last_over_time({counter}[{range}s]))"
BEFORE = "sum(last_over_time({counter}[{range}s] offset {range}s))"
INCREASE = "sum(increase({counter}[{range}s]))"


class NoData(Exception):
    """Prometheus holds no GPU data for the period."""


@dataclass
class Usage:
    idle_process_hours: float = 0.0
    idle_gpu_hours: float = 0.0
    idle_memory_gib_hours: float = 0.0
    idle_kwh: float = 0.0  # the energy idle processes' share of their GPUs' draw burned
    # GPU-hours held by services that served nothing (not counted in idle_gpu_hours)
    idle_service_gpu_hours: float = 0.0


@dataclass
class Figures:
    start: float
    end: float
    step: float
    gpus: int
    avg_utilisation: float | None
    total: Usage
    by_user: dict[str, Usage] = field(default_factory=dict)
    by_project: dict[str, Usage] = field(default_factory=dict)
    by_node: dict[str, Usage] = field(default_factory=dict)
    reclaims: float = 0.0
    freed_gib: float = 0.0
    asked: tuple[float, float] | None = None  # the period asked for, where data covers less

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600


def step_for(start: float, end: float, asked: float | None = None) -> float:
    """The step: `asked` (at least 1 s), else MIN_STEP; longer where the period would need
    more than MAX_POINTS of them."""
    return max(max(1.0, asked) if asked else MIN_STEP, -(-(end - start) // MAX_POINTS))


def _scalar(result: Any) -> float | None:
    if not result:
        return None
    return float(result[0]["value"][1])


def build(
    prom: PrometheusQueries,
    start: float,
    end: float,
    progress: Callable[[str], None] = lambda _: None,
    step: float | None = None,
) -> Figures:
    """Query Prometheus for the period [start, end] (unix seconds), at `step` (default
    MIN_STEP)."""
    if end <= start:
        raise ValueError("the period is empty: --until must be after --since")
    asked_step = step
    step = step_for(start, end, asked_step)
    progress("what the data covers")
    covered = _covered(prom, start, end, step)
    if covered is None:
        raise NoData(
            f"no GPU data between {_iso(start)} and {_iso(end)}: is the exporter scraped, "
            "and does Prometheus keep data that far back?"
        )
    asked = None
    if covered != (start, end):  # figures over the span the data covers, and said so
        asked, (start, end) = (start, end), covered
        step = step_for(start, end, asked_step)
    if end - start < step:  # less than one step (a new exporter, a short period): one step
        asked = asked or (start, end)
        start = end - step
    span = max(int(end - start), int(step))
    at = {"time": end}
    progress("GPUs and utilisation")
    gpus = _scalar(prom.custom_query(GPU_SERIES.format(range=span), params=at))
    if not gpus:
        raise NoData(f"no GPU data between {_iso(start)} and {_iso(end)}")
    utilisation = _scalar(prom.custom_query(AVG_UTILISATION.format(range=span), params=at))
    steps = int(span // step)
    progress(f"idle processes, {steps} step{'s' if steps != 1 else ''} of {step:g}s")

    def per_step(template: str) -> list[dict[str, Any]]:
        # Evaluated at step ends: a step (t - step, t] counts when the condition held in it.
        return prom.custom_query_range(
            template.format(step=int(step)),
            start_time=datetime.fromtimestamp(start + step),
            end_time=datetime.fromtimestamp(end),
            step=f"{int(step)}s",
        )

    figures = Figures(start, end, step, int(gpus), utilisation, Usage(), asked=asked)
    _add_idle(figures, per_step(IDLE_BY_PROCESS))
    progress("idle energy")
    _add_energy(figures, per_step(IDLE_POWER_BY_PROCESS))
    progress("idle services")
    _add_service_idle(figures, per_step(SERVICE_IDLE_BY_PROCESS))
    progress("reclaims")
    figures.reclaims = counted(prom, RECLAIMS, span, at)
    figures.freed_gib = counted(prom, FREED, span, at) / GiB
    return figures


def counted(prom: PrometheusQueries, counter: str, span: int, at: dict[str, Any]) -> float:
    """What `counter` counted in the period: its value at the end less its value before
    (absent before: it started within the period, from nothing). Where that went back (the
    actuator's store started afresh), `increase()`'s estimate, rounded to whole events."""
    end = _scalar(prom.custom_query(AT_END.format(counter=counter, range=span), params=at))
    if end is None:
        return 0.0
    before = _scalar(prom.custom_query(BEFORE.format(counter=counter, range=span), params=at))
    delta = end - (before or 0.0)
    if delta >= 0:
        return delta
    estimate = _scalar(prom.custom_query(INCREASE.format(counter=counter, range=span), params=at))
    return float(round(estimate or 0.0))


def _covered(
    prom: PrometheusQueries, start: float, end: float, step: float
) -> tuple[float, float] | None:
    """The part of [start, end] that GPU data covers (None: none). An edge within a step
    (and a scrape's slack) of the asked one is the asked one."""
    series = prom.custom_query_range(
        COVERAGE,
        start_time=datetime.fromtimestamp(start),
        end_time=datetime.fromtimestamp(end),
        step=f"{int(step)}s",
    )
    times = [float(v) for s in series for _, v in s.get("values", [])]
    if not times:
        return None
    first, last = max(start, min(times)), min(end, max(times))
    return (start if first - start <= step else first, end if end - last <= step + 60 else last)


def _add_idle(figures: Figures, series: list[dict[str, Any]]) -> None:
    hours = figures.step / 3600
    gpu_steps: dict[tuple[str, ...], set[float]] = defaultdict(set)
    groups: dict[str, dict[str, dict[tuple[str, ...], set[float]]]] = {
        "user": defaultdict(lambda: defaultdict(set)),
        "project": defaultdict(lambda: defaultdict(set)),
        "node": defaultdict(lambda: defaultdict(set)),
    }
    per_group: dict[str, dict[str, Usage]] = {k: defaultdict(Usage) for k in groups}
    for item in series:
        labels = item["metric"]
        gpu = (labels.get("instance", ""), labels.get("gpu", ""), labels.get("uuid", ""))
        names = {k: labels.get(k) or "(none)" for k in groups}
        for ts, value in item["values"]:
            ts, memory = float(ts), float(value)
            figures.total.idle_process_hours += hours
            figures.total.idle_memory_gib_hours += memory / GiB * hours
            gpu_steps[gpu].add(ts)
            for key, name in names.items():
                usage = per_group[key][name]
                usage.idle_process_hours += hours
                usage.idle_memory_gib_hours += memory / GiB * hours
                groups[key][name][gpu].add(ts)
    figures.total.idle_gpu_hours = sum(len(s) for s in gpu_steps.values()) * hours
    for key, by_name in groups.items():
        for name, gpus in by_name.items():
            per_group[key][name].idle_gpu_hours = sum(len(s) for s in gpus.values()) * hours
    figures.by_user = dict(per_group["user"])
    figures.by_project = dict(per_group["project"])
    figures.by_node = dict(per_group["node"])


def _add_energy(figures: Figures, series: list[dict[str, Any]]) -> None:
    """Watts in each step x the step's hours, per process, into kWh per group."""
    hours = figures.step / 3600
    by = {"user": figures.by_user, "project": figures.by_project, "node": figures.by_node}
    for item in series:
        labels = item["metric"]
        kwh = sum(float(value) for _, value in item["values"]) * hours / 1000
        figures.total.idle_kwh += kwh
        for key, groups in by.items():
            groups.setdefault(labels.get(key) or "(none)", Usage()).idle_kwh += kwh


def _add_service_idle(figures: Figures, series: list[dict[str, Any]]) -> None:
    """GPU-hours of steps in which a service on the GPU served nothing, per group."""
    hours = figures.step / 3600
    steps: dict[str, dict[str, set[tuple[str, str, str, float]]]] = defaultdict(
        lambda: defaultdict(set)
    )
    for item in series:
        labels = item["metric"]
        gpu = (labels.get("instance", ""), labels.get("gpu", ""), labels.get("uuid", ""))
        for ts, _ in item["values"]:
            at = (*gpu, float(ts))
            steps["total"][""].add(at)
            for key in ("user", "project", "node"):
                steps[key][labels.get(key) or "(none)"].add(at)
    figures.total.idle_service_gpu_hours = len(steps["total"][""]) * hours
    by = {"user": figures.by_user, "project": figures.by_project, "node": figures.by_node}
    for key, groups in by.items():
        for name, held in steps[key].items():
            groups.setdefault(name, Usage()).idle_service_gpu_hours = len(held) * hours


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="minutes")


# -- rendering -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    per_gpu_hour: float | None = None
    currency: str = ""
    per_kwh: float | None = None
    grid_g_per_kwh: float | None = None  # the grid's carbon intensity, g CO2e per kWh

    def cost(self, gpu_hours: float) -> float | None:
        return None if self.per_gpu_hour is None else gpu_hours * self.per_gpu_hour

    def energy_cost(self, kwh: float) -> float | None:
        return None if self.per_kwh is None else kwh * self.per_kwh

    def co2e_kg(self, kwh: float) -> float | None:
        return None if self.grid_g_per_kwh is None else kwh * self.grid_g_per_kwh / 1000


def summary_rows(f: Figures, price: Price) -> list[tuple[str, str]]:
    util = "n/a" if f.avg_utilisation is None else f"{100 * f.avg_utilisation:.1f} %"
    rows = [
        (
            "period",
            f"{_iso(f.start)} .. {_iso(f.end)} ({format_duration(round(f.end - f.start))})"
            + (
                f"; the data covers only this part of the period asked, "
                f"{_iso(f.asked[0])} .. {_iso(f.asked[1])}"
                if f.asked
                else ""
            ),
        ),
        ("GPUs", str(f.gpus)),
        ("GPU-hours in the period", f"{f.gpus * f.hours:.2f}"),  # as precise as the idle ones
        ("average GPU utilisation", util),
        ("idle GPU-hours", f"{f.total.idle_gpu_hours:.2f}"),
        ("idle process-hours", f"{f.total.idle_process_hours:.2f}"),
        ("idle memory GiB-hours", f"{f.total.idle_memory_gib_hours:.1f}"),
        ("processes reclaimed", f"{f.reclaims:.0f}"),
        ("memory freed by reclaims", f"{f.freed_gib:.1f} GiB"),
        ("idle energy", f"{f.total.idle_kwh:.2f} kWh"),
        ("idle service GPU-hours", f"{f.total.idle_service_gpu_hours:.2f}"),
    ]
    cost = price.cost(f.total.idle_gpu_hours)
    if cost is not None:
        rows.append((f"cost of idle GPU time ({price.currency})", f"{cost:.2f}"))
    energy = price.energy_cost(f.total.idle_kwh)
    if energy is not None:
        rows.append((f"cost of idle energy ({price.currency})", f"{energy:.2f}"))
    co2e = price.co2e_kg(f.total.idle_kwh)
    if co2e is not None:
        rows.append(("emissions of idle energy", f"{co2e:.2f} kg CO2e"))
    return rows


def group_rows(f: Figures, price: Price) -> list[dict[str, Any]]:
    rows = []
    for kind, groups in (("user", f.by_user), ("project", f.by_project), ("node", f.by_node)):
        for name, usage in sorted(groups.items(), key=lambda kv: -kv[1].idle_gpu_hours):
            figures = {k: round(v, 4) for k, v in asdict(usage).items()}
            rows.append(
                {
                    "by": kind,
                    "name": name,
                    **figures,
                    "cost": price.cost(usage.idle_gpu_hours),
                    "energy_cost": price.energy_cost(usage.idle_kwh),
                    "co2e_kg": price.co2e_kg(usage.idle_kwh),
                }
            )
    return rows


def render(f: Figures, fmt: str, price: Price, before: Figures | None = None) -> str:
    if fmt == "json":
        body: dict[str, Any] = _as_json(f, price)
        if before is not None:
            body["compare_to"] = _as_json(before, price)
        return json.dumps(body, indent=2) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(
            out,
            fieldnames=[
                "by",
                "name",
                "idle_process_hours",
                "idle_gpu_hours",
                "idle_memory_gib_hours",
                "idle_kwh",
                "idle_service_gpu_hours",
                "cost",
                "energy_cost",
                "co2e_kg",
            ],
        )
        writer.writeheader()
        writer.writerows(group_rows(f, price))
        return out.getvalue()
    markdown = fmt == "markdown"
    lines = [
        _table(
            ["", "this period", *(["before", "change"] if before else [])],
            _compare(summary_rows(f, price), summary_rows(before, price) if before else None),
            markdown,
        )
    ]
    groups = group_rows(f, price)
    if groups:
        lines.append("")
        lines.append(
            _table(
                [
                    "by",
                    "name",
                    "idle GPU-h",
                    "idle process-h",
                    "idle GiB-h",
                    "idle kWh",
                    "idle service GPU-h",
                    *([f"cost ({price.currency})"] if price.per_gpu_hour is not None else []),
                    *([f"energy cost ({price.currency})"] if price.per_kwh is not None else []),
                    *(["kg CO2e"] if price.grid_g_per_kwh is not None else []),
                ],
                [
                    [
                        g["by"],
                        g["name"],
                        f"{g['idle_gpu_hours']:.2f}",
                        f"{g['idle_process_hours']:.2f}",
                        f"{g['idle_memory_gib_hours']:.1f}",
                        f"{g['idle_kwh']:.2f}",
                        f"{g['idle_service_gpu_hours']:.2f}",
                        *([f"{g['cost']:.2f}"] if price.per_gpu_hour is not None else []),
                        *([f"{g['energy_cost']:.2f}"] if price.per_kwh is not None else []),
                        *([f"{g['co2e_kg']:.2f}"] if price.grid_g_per_kwh is not None else []),
                    ]
                    for g in groups
                ],
                markdown,
            )
        )
    return "\n".join(lines) + "\n"


def _as_json(f: Figures, price: Price) -> dict[str, Any]:
    return {
        "start": f.start,
        "end": f.end,
        "step_seconds": f.step,
        "gpus": f.gpus,
        "asked": {"start": f.asked[0], "end": f.asked[1]} if f.asked else None,
        "gpu_hours": round(f.gpus * f.hours, 4),
        "avg_utilisation": f.avg_utilisation,
        **{k: round(v, 4) for k, v in asdict(f.total).items()},
        "reclaims": f.reclaims,
        "freed_gib": round(f.freed_gib, 4),
        "idle_cost": price.cost(f.total.idle_gpu_hours),
        "idle_energy_cost": price.energy_cost(f.total.idle_kwh),
        "idle_co2e_kg": price.co2e_kg(f.total.idle_kwh),
        "currency": price.currency or None,
        "groups": group_rows(f, price),
    }


def _compare(now: list[tuple[str, str]], before: list[tuple[str, str]] | None) -> list[list[str]]:
    if before is None:
        return [[k, v] for k, v in now]
    rows = []
    for (key, value), (_, old) in zip(now, before, strict=True):
        rows.append([key, value, old, _change(value, old)])
    return rows


def _change(now: str, before: str) -> str:
    try:
        a, b = float(now.split()[0]), float(before.split()[0])
    except (ValueError, IndexError):
        return ""
    return f"{a - b:+.2f}" if b == 0 else f"{100 * (a - b) / b:+.0f} %"


def _table(head: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=False)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    # Each line ends where its text does: a long last cell pads no other row.
    return "\n".join(fmt.format(*r).rstrip() for r in [head, *rows])
