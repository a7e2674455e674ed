"""Generate the Grafana dashboards in grafana/dashboards/ (run from anywhere):

    python grafana/generate_dashboards.py           # rewrite the JSON files
    python grafana/generate_dashboards.py --check   # exit 1 if they are out of date

The JSON files are what Grafana loads (grafana/provisioning/dashboards/gpu-reclaimer.yml);
this script is their source, so every query is written once, with the same joins and label
selectors. tests/grafana/test_grafana_dashboards.py checks the files are up to date and runs every
panel's query against a real Prometheus that scraped the exporter on a simulated node.

Queries use the recording rules of alert-rules/gpu-reclaimer.rules.yml where one exists, so
the dashboard shows what the alert rules see. State names come from the actuator's models,
so run it with the project's environment (`.venv/bin/python`, after `make setup`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from actuator.models import LIVE_STATES as MODEL_LIVE_STATES
from actuator.models import State

DASHBOARDS_DIR = Path(__file__).resolve().parent / "dashboards"
SCHEMA_VERSION = 39

# Every panel and target reads the data source chosen in the `datasource` variable; the
# provisioned Prometheus data source has uid "prometheus" (provisioning/datasources/).
DS: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
DEFAULT_DS_UID = "prometheus"

# Label selectors of the fleet dashboard's variables.
GPU_SEL = 'node=~"$node", gpu=~"$gpu"'
PROC_SEL = 'node=~"$node", gpu=~"$gpu", user=~"$user", project=~"$project"'
PROC_LABELS = "instance, job, gpu, uuid, pid, node, user, command, project"
ACT_SEL = 'job="gpu-reclaimer-actuator", instance=~"$instance"'
LIVE_STATES = "|".join(str(s) for s in State if s in MODEL_LIVE_STATES)

# The rules' idle definition, per process: GpuProcessIdle's or GpuProcessStalled's condition
# at one evaluation (both recording rules' value is the memory the process holds). One series
# per process: over a range a process can be idle, then stalled, and without the `max by`
# the two series (names dropped) collide ("vector cannot contain metrics with the same
# labelset").
IDLE_PROCESSES = (
    "max by (instance, gpu, uuid, pid) "
    "(gpu_process:idle_condition or gpu_process:stalled_condition)"
)
# The same, counted once per panel interval: a process counts for the intervals in which its
# condition was recorded (no 5-minute look-back past its last sample), as `report` counts.
IDLE_PROCESSES_PER_INTERVAL = (
    "max by (instance, gpu, uuid, pid) ("
    "last_over_time(gpu_process:idle_condition[$__interval]) "
    "or last_over_time(gpu_process:stalled_condition[$__interval]))"
)
# Per GPU: the GPU's node and number, with the memory of its idle processes (absent when none).
IDLE_GPUS = f"max by (instance, gpu, uuid) ({IDLE_PROCESSES})"
# PromQL's hour() and day_of_week() are UTC; the `utc_offset` variable moves them to the
# operator's clock.
LOCAL_TIME = "vector(time() + 3600 * $utc_offset)"

Panel = dict[str, Any]


def by_gpu(expr: str) -> str:
    """A per-GPU series with the GPU's `node`, filtered by the node/gpu variables."""
    return f"({expr})\n* on (instance, gpu, uuid) group_left (node)\n  gpu_info{{{GPU_SEL}}}"


def by_proc(expr: str) -> str:
    """A per-process series with its identity (gpu_process_info), filtered by the variables."""
    return (
        f"({expr})\n* on (instance, gpu, uuid, pid) group_left (node, user, command, project)\n"
        f"  gpu_process_info{{{PROC_SEL}}}"
    )


def target(
    expr: str, legend: str = "", ref: str = "A", *, instant: bool = False, table: bool = False
) -> dict[str, Any]:
    return {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
        "format": "table" if table else "time_series",
        "refId": ref,
    }


def _thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {
        "mode": "absolute",
        "steps": [{"color": color, "value": value} for value, color in steps],
    }


GREEN = _thresholds((None, "green"))


def timeseries(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    unit: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    stack: bool = False,
    thresholds: dict[str, Any] | None = None,
    step: bool = False,
    overrides: list[dict[str, Any]] | None = None,
    axis_label: str = "",
    hourly: bool = False,
) -> Panel:
    """`axis_label`: what the values count, when the unit does not say it ("cases").
    `hourly`: the targets count events per `$__interval` (`per_hour`), at least an hour: one
    bar per hour, each that hour's total."""
    custom: dict[str, Any] = {
        "drawStyle": "bars" if hourly else "line",
        "lineInterpolation": "stepAfter" if step else "linear",
        "lineWidth": 1,
        "fillOpacity": 80 if hourly else 20 if stack else 5,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal" if stack else "none"},
        "thresholdsStyle": {"mode": "line" if thresholds else "off"},
    }
    if axis_label:
        custom["axisLabel"] = axis_label
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": custom,
        "color": {"mode": "palette-classic"},
        "thresholds": thresholds or GREEN,
    }
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    extra: dict[str, Any] = {"interval": "1h"} if hourly else {}
    return extra | {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "showLegend": True,
                "calcs": ["lastNotNull", "max"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def stat(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    unit: str,
    *,
    thresholds: dict[str, Any] | None = None,
    mappings: list[dict[str, Any]] | None = None,
    decimals: int | None = None,
) -> Panel:
    defaults: dict[str, Any] = {
        "unit": unit,
        "color": {"mode": "thresholds"},
        "thresholds": thresholds or GREEN,
        "mappings": mappings or [],
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "textMode": "auto",
            "orientation": "auto",
        },
    }


def bargauge(title: str, description: str, targets: list[dict[str, Any]], unit: str) -> Panel:
    return {
        "type": "bargauge",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "min": 0,
                "color": {"mode": "palette-classic"},
                "thresholds": GREEN,
            },
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "horizontal",
            "displayMode": "basic",
            "showUnfilled": True,
        },
    }


def heatmap(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    *,
    unit: str,
    buckets: tuple[str, str] | None = None,
    y_unit: str = "short",
    interval: str = "",
) -> Panel:
    """A heatmap. Without `buckets`, each series is a row (one per GPU) coloured by its value;
    with `buckets` (x size, y size), Grafana counts the samples per cell: the series' values
    are the y (an hour of the day), so each cell counts idle GPU samples."""
    options: dict[str, Any] = {
        "calculate": buckets is not None,
        "cellGap": 1,
        "color": {
            "mode": "scheme",
            "scheme": "Oranges",
            "fill": "dark-orange",
            "scale": "exponential",
            "exponent": 0.5,
            "steps": 64,
            "reverse": False,
        },
        "yAxis": {"axisPlacement": "left", "reverse": buckets is None, "unit": y_unit},
        "rowsFrame": {"layout": "auto"},
        "cellValues": {"unit": unit},
        "tooltip": {"mode": "single", "yHistogram": False, "showColorScale": True},
        "legend": {"show": True},
        "exemplars": {"color": "rgba(255,0,255,0.7)"},
        "filterValues": {"le": 1e-9},
        "showValue": "never",
    }
    if buckets is not None:
        options["calculation"] = {
            "xBuckets": {"mode": "size", "value": buckets[0]},
            "yBuckets": {"mode": "size", "value": buckets[1], "scale": {"type": "linear"}},
        }
    panel: Panel = {
        "type": "heatmap",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {
            "defaults": {
                "custom": {
                    "hideFrom": {"legend": False, "tooltip": False, "viz": False},
                    "scaleDistribution": {"type": "linear"},
                }
            },
            "overrides": [],
        },
        "options": options,
    }
    if interval:
        panel["interval"] = interval
    return panel


def _override(name: str, **props: Any) -> dict[str, Any]:
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [{"id": key, "value": value} for key, value in props.items()],
    }


def table(
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    *,
    rename: dict[str, str],
    hide: list[str],
    overrides: list[dict[str, Any]],
    sort_by: str | None = None,
) -> Panel:
    order = [
        "node",
        "gpu",
        "pid",
        "user",
        "command",
        "project",
        "alertname",
        "alertstate",
        "class",
        "footprint",
        "severity",
        *rename,
    ]
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        # One row per process: the instant queries share their label set, merge joins them.
        "transformations": [
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {
                    "excludeByName": dict.fromkeys(hide, True),
                    "indexByName": {name: i for i, name in enumerate(order)},
                    "renameByName": rename,
                },
            },
        ],
        "fieldConfig": {
            "defaults": {
                "custom": {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True},
                "thresholds": GREEN,
                "mappings": [],
            },
            "overrides": overrides,
        },
        "options": {
            "showHeader": True,
            "cellHeight": "sm",
            "footer": {"show": False, "reducer": ["sum"], "fields": ""},
            "sortBy": [{"displayName": sort_by, "desc": True}] if sort_by else [],
        },
    }


def row(title: str) -> Panel:
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


def _value_map(values: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "value",
            "options": {
                value: {"text": text, "color": color, "index": i}
                for i, (value, (text, color)) in enumerate(values.items())
            },
        }
    ]


def layout(items: list[tuple[Panel, int, int]]) -> list[Panel]:
    """Place panels left to right on the 24-column grid; rows span the full width."""
    panels: list[Panel] = []
    x = y = line_h = 0
    for panel_id, (panel, width, height) in enumerate(items, start=1):
        if panel["type"] == "row":
            y, x, line_h = y + line_h, 0, 0
            width, height = 24, 1
        elif x + width > 24:
            y, x, line_h = y + line_h, 0, 0
        panels.append(
            {"id": panel_id, "gridPos": {"h": height, "w": width, "x": x, "y": y}, **panel}
        )
        x += width
        line_h = max(line_h, height)
        if panel["type"] == "row":
            y, x, line_h = y + 1, 0, 0
    return panels


def datasource_variable() -> dict[str, Any]:
    return {
        "type": "datasource",
        "name": "datasource",
        "label": "Data source",
        "query": "prometheus",
        "current": {"selected": True, "text": "Prometheus", "value": DEFAULT_DS_UID},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def query_variable(name: str, label: str, query: str, *, numeric: bool = False) -> dict[str, Any]:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DS,
        "definition": query,
        "query": {
            "qryType": 1,
            "query": query,
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        },
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "hide": 0,
        "options": [],
        "refresh": 2,  # on time range change: nodes and processes come and go
        "regex": "",
        "sort": 3 if numeric else 1,
        "skipUrlSync": False,
    }


def utc_offset_variable() -> dict[str, Any]:
    hours = [str(h) for h in range(-12, 15)]
    return {
        "type": "custom",
        "name": "utc_offset",
        "label": "UTC offset (h)",
        "description": "Hours added to UTC for the hour-of-day and hour-of-week heatmaps "
        "(8 for China Standard Time).",
        "query": ",".join(hours),
        "current": {"selected": True, "text": "0", "value": "0"},
        "options": [{"selected": h == "0", "text": h, "value": h} for h in hours],
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "skipUrlSync": False,
    }


def dashboard(
    uid: str,
    title: str,
    description: str,
    panels: list[Panel],
    variables: list[dict[str, Any]],
    *,
    annotations: list[dict[str, Any]] = (),  # type: ignore[assignment]
    link_to: tuple[str, str] | None = None,
) -> dict[str, Any]:
    builtin = {
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    }
    links = []
    if link_to:
        links.append(
            {
                "title": link_to[1],
                "type": "link",
                "url": f"/d/{link_to[0]}",
                "icon": "dashboard",
                "keepTime": True,
                "includeVars": False,
                "asDropdown": False,
                "targetBlank": False,
                "tags": [],
                "tooltip": "",
            }
        )
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["gpu", "gpu-reclaimer"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "links": links,
        "annotations": {"list": [builtin, *annotations]},
        "templating": {"list": variables},
        "panels": panels,
    }


# The idle-time bars: title, description, grouped by, *_over_time, in GiB, unit.
IDLE_BARS = [
    (
        "Idle GPU-hours by user",
        "Over the dashboard's time range: for each user, the hours a GPU held at least one of "
        "their processes meeting the idle or stalled condition (one GPU for one hour = 1, "
        "however many of their processes were on it): `gpu-reclaimer report`'s idle GPU-hours.",
        "user",
        "count_over_time",
        False,
        "h",
    ),
    (
        "Idle GPU-hours by project",
        "As by user, per project (the exporter's project mapping; empty when none matched).",
        "project",
        "count_over_time",
        False,
        "h",
    ),
    (
        "Idle memory by user (GiB-hours)",
        "Over the dashboard's time range: GPU memory held by idle or stalled processes, times "
        "the hours it was held (8 GiB for 2 h = 16).",
        "user",
        "sum_over_time",
        True,
        "short",
    ),
    (
        "Idle memory by project (GiB-hours)",
        "As by user, per project.",
        "project",
        "sum_over_time",
        True,
        "short",
    ),
]


def idle_hours(by: str, over_time: str, *, gib: bool = False) -> str:
    """GiB-hours of idle processes over the dashboard's range, per `by`: samples of the idle
    condition (its value is the memory held) at the panel's interval, times the interval.
    The identity is the last one seen in the range, so a process that exited since still
    counts."""
    scale = " / 1073741824" if gib else ""
    return (
        f"sum by ({by}) (\n"
        f"    {over_time}[$__range:$__interval]){scale}\n"
        f"  * on (instance, gpu, uuid, pid) group_left ({by})\n"
        f"    max by (instance, gpu, uuid, pid, {by}) "
        f"(last_over_time(gpu_process_info{{{PROC_SEL}}}[$__range]))\n"
        ") * $__interval_ms / 3600000"
    )


def idle_gpu_hours(by: str) -> str:
    """GPU-hours per `by` over the dashboard's range: the intervals in which a GPU held at
    least one idle or stalled process of theirs, times the interval (as the report counts
    them: one GPU for one hour is 1, however many of their processes were on it)."""
    return (
        f"sum by ({by}) (\n"
        "  count_over_time((\n"
        f"    max by (instance, gpu, uuid, {by}) (\n"
        f"      {IDLE_PROCESSES_PER_INTERVAL}\n"
        f"      * on (instance, gpu, uuid, pid) group_left ({by})\n"
        f"        max by (instance, gpu, uuid, pid, {by}) "
        f"(last_over_time(gpu_process_info{{{PROC_SEL}}}[$__interval]))\n"
        "    )\n"
        "  )[$__range:$__interval])\n"
        ") * $__interval_ms / 3600000"
    )


def fleet() -> dict[str, Any]:
    proc_alerts = (
        f"max by ({PROC_LABELS}) (\n"
        f'    ALERTS{{class="idle", alertstate="pending", {PROC_SEL}}} * 1\n'
        f'  or ALERTS{{class="idle", alertstate="firing", {PROC_SEL}}} * 2\n'
        f'  or ALERTS{{class="stalled", alertstate="pending", {PROC_SEL}}} * 3\n'
        f'  or ALERTS{{class="stalled", alertstate="firing", {PROC_SEL}}} * 4\n'
        ")"
    )
    alert_classes = 'class=~"idle|stalled|orphaned|health", node=~"$node"'
    process_legend = "{{user}} {{command}} pid {{pid}} ({{node}} GPU {{gpu}})"
    gpu_legend = "{{node}} GPU {{gpu}}"
    minutes_5 = _thresholds((None, "green"), (300, "red"))

    items: list[tuple[Panel, int, int]] = [
        (row("Fleet"), 24, 1),
        (
            stat(
                "GPUs",
                "GPUs reporting through the exporter (gpu_info: one per healthy GPU).",
                [target(f"count(gpu_info{{{GPU_SEL}}})")],
                "none",
            ),
            4,
            4,
        ),
        (
            stat(
                "Mean GPU utilisation",
                "Device utilisation averaged over the selected GPUs. An NCCL hang reads 100 %: "
                "utilisation alone does not prove work (see heartbeat/log staleness).",
                [target(f"avg({by_gpu('gpu_utilization_ratio')})")],
                "percentunit",
                thresholds=_thresholds((None, "red"), (0.3, "orange"), (0.6, "green")),
            ),
            4,
            4,
        ),
        (
            stat(
                "Memory used",
                "Device memory used / total over the selected GPUs.",
                [
                    target(
                        f"sum({by_gpu('gpu_memory_used_bytes')})\n/\n"
                        f"sum({by_gpu('gpu_memory_total_bytes')})"
                    )
                ],
                "percentunit",
            ),
            4,
            4,
        ),
        (
            stat(
                "Processes on GPUs",
                "Processes holding memory on the selected GPUs (and users).",
                [target(f"count({by_proc('gpu_process_memory_used_bytes > 0')}) or vector(0)")],
                "none",
            ),
            4,
            4,
        ),
        (
            stat(
                "Memory held by idle or stalled processes",
                "GPU memory of the processes that meet GpuProcessIdle's or GpuProcessStalled's "
                "condition right now (recording rules gpu_process:idle_condition and "
                "gpu_process:stalled_condition; the alerts fire after `for: 5m`).",
                [
                    target(
                        "sum("
                        + by_proc("gpu_process:idle_condition or gpu_process:stalled_condition")
                        + ") or vector(0)"
                    )
                ],
                "bytes",
                thresholds=_thresholds((None, "green"), (1, "orange")),
            ),
            4,
            4,
        ),
        (
            stat(
                "Orphaned memory",
                "Device memory that no listed process accounts for, summed over the GPUs where "
                "it is above GpuMemoryOrphaned's threshold (gpu:memory_orphaned_condition: "
                "> 2 GiB and > 5 % of the card; the driver's own few 100 MiB per GPU stay "
                "below it). Leaked CUDA contexts, dead containers: see the per-GPU graph.",
                [target(f"sum({by_gpu('gpu:memory_orphaned_condition')}) or vector(0)")],
                "bytes",
                thresholds=_thresholds((None, "green"), (2 * 1024**3, "orange")),
            ),
            4,
            4,
        ),
        (row("Idle time and usage patterns"), 24, 1),
        (
            heatmap(
                "Idle GPU time per GPU",
                "Per GPU, the share of each interval in which at least one of its processes "
                "met GpuProcessIdle's or GpuProcessStalled's condition (the rules' recording "
                "rules; 1 = idle the whole interval). The alerts fire after `for: 5m`.",
                [
                    target(
                        by_gpu(
                            f"avg_over_time((\n  {IDLE_GPUS} * 0 + 1\n"
                            "  or max by (instance, gpu, uuid) (gpu_info * 0)\n"
                            ")[$__interval:])"
                        ),
                        gpu_legend,
                    )
                ],
                unit="percentunit",
                interval="1m",
            ),
            24,
            8,
        ),
        (
            heatmap(
                "Idle GPU time by hour of day",
                "One column per day, one row per hour of the day (UTC + the `utc_offset` "
                "variable): each cell counts idle GPU samples, one per GPU holding an idle or "
                "stalled process per 5 minutes, so 12 = one GPU idle for that whole hour. When "
                "do the idle GPUs pile up?",
                [
                    target(
                        by_gpu(f"{IDLE_GPUS} * 0") + f"\n+ on () group_left () hour({LOCAL_TIME})",
                        "hour",
                    )
                ],
                unit="short",
                buckets=("1d", "1"),
                interval="5m",
            ),
            12,
            8,
        ),
        (
            heatmap(
                "Idle GPU time by hour of week",
                "One column per week, one row per hour of the week (0 = Sunday 00:00, UTC + "
                "`utc_offset`); each cell counts idle GPU samples (one per idle GPU per 5 "
                "minutes). Usage patterns: nights, weekends, the deadline week.",
                [
                    target(
                        by_gpu(f"{IDLE_GPUS} * 0")
                        + f"\n+ on () group_left () (day_of_week({LOCAL_TIME}) * 24 "
                        f"+ hour({LOCAL_TIME}))",
                        "hour of week",
                    )
                ],
                unit="short",
                buckets=("7d", "1"),
                interval="5m",
            ),
            12,
            8,
        ),
        *[
            (
                bargauge(
                    title,
                    description,
                    [
                        target(
                            idle_gpu_hours(by)
                            if over_time == "count_over_time"
                            else idle_hours(
                                by, f"{over_time}({IDLE_PROCESSES_PER_INTERVAL}", gib=gib
                            ),
                            "{{" + by + "}}",
                            instant=True,
                        )
                    ],
                    unit,
                ),
                6,
                8,
            )
            for title, description, by, over_time, gib, unit in IDLE_BARS
        ],
        (
            table(
                "Top idle holders now",
                "The ten processes holding the most GPU memory while meeting the idle or "
                "stalled condition right now: the first candidates for a word with their "
                "owner (the alerts fire after `for: 5m`).",
                [
                    target(
                        f"topk(10, {by_proc(IDLE_PROCESSES)})",
                        instant=True,
                        table=True,
                    )
                ],
                rename={"Value": "Memory held"},
                hide=["Time", "instance", "job", "uuid"],
                overrides=[_override("Memory held", unit="bytes")],
                sort_by="Memory held",
            ),
            24,
            8,
        ),
        (row("GPUs"), 24, 1),
        (
            timeseries(
                "GPU utilisation",
                "nvmlDeviceGetUtilizationRates per GPU.",
                [target(by_gpu("gpu_utilization_ratio"), gpu_legend)],
                "percentunit",
                minimum=0,
                maximum=1,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "GPU memory used",
                "Device memory used per GPU; the dashed total is the card's capacity.",
                [
                    target(by_gpu("gpu_memory_used_bytes"), gpu_legend),
                    target(by_gpu("gpu_memory_total_bytes"), gpu_legend + " total", "B"),
                ],
                "bytes",
                minimum=0,
                overrides=[
                    {
                        "matcher": {"id": "byFrameRefID", "options": "B"},
                        "properties": [
                            {"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
                            {"id": "custom.fillOpacity", "value": 0},
                        ],
                    }
                ],
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Orphaned memory (device used - sum of processes)",
                "gpu:memory_unaccounted_bytes per GPU. Nothing to kill: find the holder or "
                "drain the node and reset the GPU (docs/runbook.md#gpumemoryorphaned).",
                [target(by_gpu("gpu:memory_unaccounted_bytes"), gpu_legend)],
                "bytes",
                minimum=0,
                thresholds=_thresholds((None, "green"), (2 * 1024**3, "red")),
            ),
            12,
            8,
        ),
        (
            timeseries(
                "GPU memory by process",
                "Memory each process holds, stacked per GPU and user.",
                [target(by_proc("gpu_process_memory_used_bytes"), process_legend)],
                "bytes",
                minimum=0,
                stack=True,
            ),
            12,
            8,
        ),
        (row("Processes"), 24, 1),
        (
            table(
                "GPU processes",
                "One row per process on a GPU, with its owner (gpu_process_info). SM util is "
                "the highest sample of the rules' window (empty: unknown, e.g. MIG); CPU is the "
                "process tree's cores over the window; ages are seconds since the last "
                "heartbeat / log write (empty: the process has none). Alert: the process's "
                "GpuProcessIdle / GpuProcessStalled state.",
                [
                    target(
                        by_proc("gpu_process_memory_used_bytes"), ref="A", instant=True, table=True
                    ),
                    target(
                        by_proc("gpu_process:sm_utilization_ratio:max_window"),
                        ref="B",
                        instant=True,
                        table=True,
                    ),
                    target(
                        by_proc("gpu_process:cpu_usage_cores:rate_window"),
                        ref="C",
                        instant=True,
                        table=True,
                    ),
                    target(
                        "time() - " + by_proc("gpu_process_heartbeat_timestamp_seconds"),
                        ref="D",
                        instant=True,
                        table=True,
                    ),
                    target(
                        "time() - " + by_proc("gpu_process_log_write_timestamp_seconds"),
                        ref="E",
                        instant=True,
                        table=True,
                    ),
                    target(
                        "time() - " + by_proc("gpu_process_start_time_seconds"),
                        ref="F",
                        instant=True,
                        table=True,
                    ),
                    target(proc_alerts, ref="G", instant=True, table=True),
                ],
                rename={
                    "Value #A": "Memory",
                    "Value #B": "SM util (window max)",
                    "Value #C": "CPU cores",
                    "Value #D": "Heartbeat age",
                    "Value #E": "Log write age",
                    "Value #F": "Running for",
                    "Value #G": "Alert",
                },
                hide=["Time", "instance", "job", "uuid"],
                overrides=[
                    _override("Memory", unit="bytes"),
                    _override("SM util (window max)", unit="percentunit", decimals=0),
                    _override("CPU cores", unit="none", decimals=2),
                    _override(
                        "Heartbeat age",
                        unit="s",
                        thresholds=minutes_5,
                        **{"custom.cellOptions": {"type": "color-text"}},
                    ),
                    _override(
                        "Log write age",
                        unit="s",
                        thresholds=minutes_5,
                        **{"custom.cellOptions": {"type": "color-text"}},
                    ),
                    _override("Running for", unit="s"),
                    _override(
                        "Alert",
                        mappings=_value_map(
                            {
                                "1": ("idle (pending)", "orange"),
                                "2": ("idle (firing)", "red"),
                                "3": ("stalled (pending)", "orange"),
                                "4": ("stalled (firing)", "red"),
                            }
                        ),
                        **{"custom.cellOptions": {"type": "color-background"}},
                    ),
                ],
                sort_by="Memory",
            ),
            24,
            10,
        ),
        (
            timeseries(
                "Per-process SM utilisation",
                "Per-process SM utilisation from NVML samples. Absent where unsupported "
                "(MIG, NOT_SUPPORTED): unknown is never drawn as 0.",
                [target(by_proc("gpu_process_sm_utilization_ratio"), process_legend)],
                "percentunit",
                minimum=0,
                maximum=1,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Process-tree CPU",
                "CPU cores used by each process and its children over the rules' window "
                "(gpu_process:cpu_usage_cores:rate_window). Above 0.1 core, a process is "
                "working (data loading, checkpointing) and never idle.",
                [target(by_proc("gpu_process:cpu_usage_cores:rate_window"), process_legend)],
                "none",
                minimum=0,
                thresholds=_thresholds((None, "green"), (0.1, "orange")),
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Heartbeat and log staleness",
                "Seconds since each process's last heartbeat and last log write. A process "
                "holding memory with both stale (GpuProcessStalled) is hung, whatever its "
                "utilisation says. The red line is the brief's 5 minutes.",
                [
                    target(
                        "time() - " + by_proc("gpu_process_heartbeat_timestamp_seconds"),
                        "heartbeat: " + process_legend,
                    ),
                    target(
                        "time() - " + by_proc("gpu_process_log_write_timestamp_seconds"),
                        "log: " + process_legend,
                        "B",
                    ),
                ],
                "s",
                minimum=0,
                thresholds=minutes_5,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Memory growth in the window (loading)",
                "How far each process's memory rose above its window minimum "
                "(gpu_process:memory_growth_bytes:window). Above 64 MiB it is loading and "
                "never idle or stalled.",
                [target(by_proc("gpu_process:memory_growth_bytes:window"), process_legend)],
                "bytes",
                minimum=0,
                thresholds=_thresholds((None, "green"), (64 * 1024**2, "orange")),
            ),
            12,
            8,
        ),
        (row("Alerts"), 24, 1),
        (
            table(
                "Active alerts",
                "Pending and firing GPU Reclaimer alerts (ALERTS) on the selected nodes.",
                [target(f"ALERTS{{{alert_classes}}}", instant=True, table=True)],
                rename={},
                hide=[
                    "Time",
                    "Value",
                    "__name__",
                    "instance",
                    "job",
                    "uuid",
                    "uid",
                    "container",
                    "pod",
                    "pod_uid",
                    "namespace",
                    "slurm_job",
                    "reclaim",
                ],
                overrides=[
                    _override(
                        "alertstate",
                        mappings=_value_map(
                            {"pending": ("pending", "orange"), "firing": ("firing", "red")}
                        ),
                        **{"custom.cellOptions": {"type": "color-text"}},
                    )
                ],
            ),
            14,
            8,
        ),
        (
            timeseries(
                "Alerts by class and state",
                "Number of pending / firing alerts per class (idle, stalled, orphaned, health).",
                [
                    target(
                        f"count by (class, alertstate) (ALERTS{{{alert_classes}}})",
                        "{{class}} {{alertstate}}",
                    )
                ],
                "none",
                minimum=0,
                step=True,
            ),
            10,
            8,
        ),
        (row("Exporter health"), 24, 1),
        (
            timeseries(
                "Exporter, NVML and evidence gate",
                "Per exporter instance (not filtered by node: a broken exporter reports no "
                "node). The evidence gate (instance:gpu_exporter_healthy:window) is 1 when every "
                "scrape of the window succeeded and NVML answered: only then may the rules "
                "judge a process idle.",
                [
                    target('up{job="gpu-exporter"}', "{{instance}} scrape up"),
                    target("gpu_exporter_nvml_up", "{{instance}} NVML up", "B"),
                    target(
                        "instance:gpu_exporter_healthy:window\n"
                        'or on (instance) (0 * up{job="gpu-exporter"})',
                        "{{instance}} evidence gate",
                        "C",
                    ),
                ],
                "none",
                minimum=0,
                maximum=1,
                step=True,
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Scrape duration",
                "Time the exporter spent collecting (gpu_exporter_scrape_duration_seconds) "
                "and the whole scrape as Prometheus saw it. NVML calls are bounded by "
                "--nvml-timeout.",
                [
                    target("gpu_exporter_scrape_duration_seconds", "{{instance}} collect"),
                    target(
                        'scrape_duration_seconds{job="gpu-exporter"}', "{{instance}} scrape", "B"
                    ),
                ],
                "s",
                minimum=0,
            ),
            8,
            8,
        ),
        (
            timeseries(
                "GPU devices",
                "Device up (0: NVML errors for that GPU, e.g. GPU lost) and whether "
                "per-process utilisation is available (0 on MIG / NOT_SUPPORTED: idleness "
                "cannot be judged from utilisation there).",
                [
                    target('gpu_exporter_device_up{gpu=~"$gpu"}', "{{instance}} GPU {{gpu}} up"),
                    target(
                        'gpu_exporter_process_utilization_supported{gpu=~"$gpu"}',
                        "{{instance}} GPU {{gpu}} per-process util",
                        "B",
                    ),
                ],
                "none",
                minimum=0,
                maximum=1,
                step=True,
            ),
            8,
            8,
        ),
    ]
    firing = {
        "datasource": DS,
        "enable": True,
        "hide": False,
        "iconColor": "red",
        "name": "Idle / stalled alerts firing",
        "expr": f'ALERTS{{alertstate="firing", class=~"idle|stalled", {PROC_SEL}}}',
        "step": "60s",
        "titleFormat": "{{alertname}}",
        "textFormat": "{{user}} {{command}} pid {{pid}} on {{node}} GPU {{gpu}}",
        "tagKeys": "class,node,user",
        "useValueForTime": False,
    }
    return dashboard(
        "gpu-reclaimer-fleet",
        "GPU Reclaimer — fleet",
        "GPUs, the processes on them, the idle signals the alert rules use, alert states and "
        "exporter health.",
        layout(items),
        [
            datasource_variable(),
            query_variable("node", "Node", "label_values(gpu_info, node)"),
            query_variable(
                "gpu", "GPU", 'label_values(gpu_info{node=~"$node"}, gpu)', numeric=True
            ),
            query_variable(
                "user", "User", 'label_values(gpu_process_info{node=~"$node", gpu=~"$gpu"}, user)'
            ),
            query_variable(
                "project",
                "Project",
                'label_values(gpu_process_info{node=~"$node", gpu=~"$gpu", user=~"$user"}, '
                "project)",
            ),
            utc_offset_variable(),
        ],
        annotations=[firing],
        link_to=("gpu-reclaimer-actuator", "GPU Reclaimer — actuator"),
    )


def actuator() -> dict[str, Any]:
    def counter_stat(
        title: str,
        description: str,
        metric: str,
        unit: str = "none",
        thresholds: dict[str, Any] | None = None,
    ) -> Panel:
        return stat(
            title,
            description + " Over the dashboard's time range.",
            [target(f"sum(increase({metric}{{{ACT_SEL}}}[$__range]))", instant=True)],
            unit,
            decimals=0 if unit == "none" else None,
            thresholds=thresholds,
        )

    def per_hour(metric: str, legend: str, ref: str = "A", by: str = "") -> dict[str, Any]:
        """Each hour's total (the panel's interval is at least an hour: `hourly`), not a
        short window's rate scaled up to an hour, whose peaks read as hourly totals."""
        grouping = f" by ({by})" if by else ""
        return target(f"sum{grouping} (increase({metric}{{{ACT_SEL}}}[$__interval]))", legend, ref)

    items: list[tuple[Panel, int, int]] = [
        (row("Outcomes"), 24, 1),
        (
            stat(
                "Actuator",
                "Prometheus can scrape the actuator's /metrics, and the actuator can read its "
                "database (gpu_reclaimer_store_up).",
                [
                    target(f"min(up{{{ACT_SEL}}})", "scrape"),
                    target(f"min(gpu_reclaimer_store_up{{{ACT_SEL}}})", "database", "B"),
                ],
                "none",
                thresholds=_thresholds((None, "red"), (1, "green")),
                mappings=_value_map({"0": ("DOWN", "red"), "1": ("up", "green")}),
            ),
            4,
            4,
        ),
        (
            counter_stat(
                "Idle processes detected",
                "Cases opened from reclaim alerts (gpu_idle_detected_total).",
                "gpu_idle_detected_total",
            ),
            4,
            4,
        ),
        (
            counter_stat(
                "GPUs released",
                "Cases whose process tree exited and whose memory NVML shows freed "
                "(gpu_released_success_total).",
                "gpu_released_success_total",
            ),
            4,
            4,
        ),
        (
            counter_stat(
                "Releases failed",
                "Signalled but the memory was not freed, or the process was unkillable "
                "(gpu_release_failed_total).",
                "gpu_release_failed_total",
                thresholds=_thresholds((None, "green"), (1, "red")),
            ),
            4,
            4,
        ),
        (
            counter_stat(
                "GPU memory freed",
                "GPU memory given back by reclaimed cases (gpu_memory_freed_bytes_total).",
                "gpu_memory_freed_bytes_total",
                "bytes",
            ),
            4,
            4,
        ),
        (
            stat(
                "Circuit breaker",
                "OPEN: too large a share of the node's GPU processes was flagged at once; "
                "enforcement is paused until POST /api/v1/breaker/reset.",
                [target(f"max(gpu_reclaimer_circuit_breaker_open{{{ACT_SEL}}})")],
                "none",
                thresholds=_thresholds((None, "green"), (1, "red")),
                mappings=_value_map({"0": ("closed", "green"), "1": ("OPEN", "red")}),
            ),
            4,
            4,
        ),
        (
            counter_stat(
                "Owners warned",
                "Cases whose owner got the notice before the grace period "
                "(gpu_reclaimer_notices_total); every reclaim in enforce mode had one.",
                "gpu_reclaimer_notices_total",
            ),
            8,
            4,
        ),
        (
            stat(
                "Time to reclaim",
                "From a case's opening (the alert reached the actuator) to its process tree's "
                "exit, median and 90th percentile of the cases reclaimed in the dashboard's "
                "time range (gpu_reclaimer_time_to_reclaim_seconds; mostly the grace period).",
                [
                    target(
                        f"histogram_quantile({q}, sum by (le) (increase("
                        f"gpu_reclaimer_time_to_reclaim_seconds_bucket{{{ACT_SEL}}}[$__range])))",
                        legend,
                        ref,
                        instant=True,
                    )
                    for q, legend, ref in ((0.5, "median", "A"), (0.9, "p90", "B"))
                ],
                "s",
            ),
            16,
            4,
        ),
        (row("Activity"), 24, 1),
        (
            timeseries(
                "Cases opened, released, failed",
                "Each hour's totals, from the actuator's counters: cases opened, reclaimed, "
                "failed, and the owners warned.",
                [
                    per_hour("gpu_idle_detected_total", "opened"),
                    per_hour("gpu_released_success_total", "released", "B"),
                    per_hour("gpu_release_failed_total", "failed", "C"),
                    per_hour("gpu_reclaimer_notices_total", "owners warned", "D"),
                ],
                "short",
                minimum=0,
                axis_label="cases per hour",
                hourly=True,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "GPU memory freed per hour",
                "GPU memory freed by reclaimed cases, per hour.",
                [per_hour("gpu_memory_freed_bytes_total", "freed per hour")],
                "bytes",
                minimum=0,
                axis_label="per hour",
                hourly=True,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Cases by state",
                "Cases in each state (gpu_reclaimer_cases). Live: pending, notified, "
                "terminating, killing, snoozed, deferred (held by a limit or the breaker). "
                "Final: reclaimed, failed, cancelled, refused, observed (what observe mode "
                "would have done).",
                [
                    target(
                        f"sum by (state) (gpu_reclaimer_cases{{{ACT_SEL}}})",
                        "{{state}}",
                    )
                ],
                "none",
                minimum=0,
                axis_label="cases",
                stack=True,
                step=True,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Reclaim alerts vs live cases",
                "Reclaim alerts firing in Prometheus, against the actuator's live cases. "
                "Alerts firing with no case for long: check Alertmanager's delivery to the "
                "actuator (webhook codes below).",
                [
                    target(
                        'count(ALERTS{reclaim="true", alertstate="firing"}) or vector(0)',
                        "reclaim alerts firing",
                    ),
                    target(
                        f'sum(gpu_reclaimer_cases{{{ACT_SEL}, state=~"{LIVE_STATES}"}})',
                        "live cases",
                        "B",
                    ),
                ],
                "none",
                minimum=0,
                step=True,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Signals sent",
                "SIGTERM and SIGKILL delivered through pidfds, per hour. SIGKILLs mean "
                "processes ignored SIGTERM for term_timeout.",
                [per_hour("gpu_reclaimer_signals_sent_total", "{{signal}}", by="signal")],
                "short",
                minimum=0,
                axis_label="signals per hour",
                hourly=True,
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Refusals by reason",
                "Cases refused (protected, identity mismatch, unknown evidence, bad target, "
                "undelivered notice, …), per hour. Limits and the breaker defer instead.",
                [per_hour("gpu_reclaimer_refusals_total", "{{reason}}", by="reason")],
                "short",
                minimum=0,
                axis_label="refusals per hour",
                hourly=True,
            ),
            8,
            8,
        ),
        (
            bargauge(
                "Refusals by reason (time range)",
                "Refused cases over the dashboard's time range, by reason.",
                [
                    target(
                        "sum by (reason) "
                        f"(increase(gpu_reclaimer_refusals_total{{{ACT_SEL}}}[$__range]))",
                        "{{reason}}",
                        instant=True,
                    )
                ],
                "none",
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Webhook requests by status code",
                "Alertmanager webhook calls per second. 2xx accepted; 400/413/415/422 bad "
                "input (never retried); 401/403 token problems (check "
                "deploy/secrets/actuator-token); 503 database unavailable.",
                [
                    target(
                        "sum by (code) "
                        f"(rate(gpu_reclaimer_webhook_requests_total{{{ACT_SEL}}}"
                        "[$__rate_interval]))",
                        "{{code}}",
                    )
                ],
                "reqps",
                minimum=0,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Circuit breaker over time",
                "1 while the breaker stops enforcement.",
                [target(f"max(gpu_reclaimer_circuit_breaker_open{{{ACT_SEL}}})", "breaker open")],
                "none",
                minimum=0,
                maximum=1,
                step=True,
                thresholds=_thresholds((None, "green"), (1, "red")),
            ),
            12,
            8,
        ),
        (row("Demand (reclaim_when: demand)"), 24, 1),
        (
            timeseries(
                "Waiting for GPUs",
                "Requests waiting for GPUs at the actuator's last reading, by source (pending "
                "Slurm jobs, unschedulable pods, a PromQL pool, the node's wait list). Only "
                "what waits can make a reclaim_when: demand process go (docs/demand.md).",
                [
                    target(
                        f"sum by (source) (gpu_reclaimer_demand_waiting{{{ACT_SEL}}})",
                        "{{source}}",
                    )
                ],
                "none",
                minimum=0,
                step=True,
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Demand sources up",
                "0: the source failed or answered nonsense; demand is unknown and nothing "
                "under reclaim_when: demand is reclaimed until it answers again.",
                [
                    target(
                        f"min by (source) (gpu_reclaimer_demand_source_up{{{ACT_SEL}}})",
                        "{{source}}",
                    )
                ],
                "none",
                minimum=0,
                maximum=1,
                step=True,
                thresholds=_thresholds((None, "red"), (1, "green")),
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Reclaims by trigger, and needless ones",
                "Reclaims per hour: idle (the grace ran out) or demand (someone waited); "
                "needless: the reclaimed GPU was not taken within demand.needless_after.",
                [
                    per_hour("gpu_reclaimer_reclaims_total", "{{trigger}}", by="trigger"),
                    per_hour(
                        "gpu_reclaimer_needless_reclaims_total",
                        "needless ({{trigger}})",
                        "B",
                        by="trigger",
                    ),
                ],
                "short",
                minimum=0,
                axis_label="reclaims per hour",
                hourly=True,
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Time from demand to a free GPU",
                "From a waiting request choosing an idle process's GPU to that GPU being free "
                "(the grace, then the exit): median and 90th percentile.",
                [
                    target(
                        "histogram_quantile(0.5, sum by (le) (rate("
                        f"gpu_reclaimer_demand_to_free_seconds_bucket{{{ACT_SEL}}}"
                        "[$__rate_interval])))",
                        "p50",
                    ),
                    target(
                        "histogram_quantile(0.9, sum by (le) (rate("
                        f"gpu_reclaimer_demand_to_free_seconds_bucket{{{ACT_SEL}}}"
                        "[$__rate_interval])))",
                        "p90",
                        "B",
                    ),
                ],
                "s",
                minimum=0,
            ),
            24,
            8,
        ),
    ]
    return dashboard(
        "gpu-reclaimer-actuator",
        "GPU Reclaimer — actuator",
        "What the actuator did with the reclaim alerts: cases, outcomes, signals, refusals, "
        "webhook deliveries and the circuit breaker.",
        layout(items),
        [
            datasource_variable(),
            query_variable(
                "instance", "Actuator", 'label_values(up{job="gpu-reclaimer-actuator"}, instance)'
            ),
        ],
        link_to=("gpu-reclaimer-fleet", "GPU Reclaimer — fleet"),
    )


DASHBOARDS = {"gpu-reclaimer-fleet.json": fleet, "gpu-reclaimer-actuator.json": actuator}


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {
        name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
        for name, build in DASHBOARDS.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render().items():
        path = DASHBOARDS_DIR / name
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run python {Path(__file__).name})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
