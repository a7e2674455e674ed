"""A chaos run's report: JSON (`violations`, a list; `faults`, counts by kind) and Markdown
for people, side by side in the output directory."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from actuator.chaos.run import MISS_AFTER, WINDOW, Outcome, machine


def _around(records: list[dict[str, Any]], case: int | None, limit: int = 12) -> list[Any]:
    if case is None:
        return []
    return [r for r in records if r.get("case") == case][:limit]


def summary(outcome: Outcome) -> dict[str, Any]:
    v, plan = outcome.verdict, outcome.plan
    latencies = sorted(r.latency for r in v.reclaims)
    usage = {
        name: {
            "first": asdict(readings[0]),
            "last": asdict(readings[-1]),
            "readings": len(readings),
        }
        for name, readings in outcome.usage.items()
        if readings
    }
    return {
        "seed": plan.seed,
        "minutes": round(plan.seconds / 60, 2),
        "machine": machine(),
        "window_seconds": WINDOW,
        "miss_after_seconds": MISS_AFTER,
        "workloads": dict(Counter(w.kind for w in plan.workloads)),
        "workloads_skipped": outcome.skipped,
        "faults": outcome.faults,
        "signals": v.signals,
        "notices": v.notices,
        "violations": [
            {**asdict(x), "audit": _around(outcome.records, x.case)} for x in v.violations
        ],
        "reclaims": len(v.reclaims),
        "reclaim_latency_seconds": {
            "median": round(statistics.median(latencies), 1) if latencies else None,
            "p90": round(latencies[int(0.9 * (len(latencies) - 1))], 1) if latencies else None,
            "max": round(latencies[-1], 1) if latencies else None,
        },
        "missed": [asdict(m) for m in v.missed],
        "cases": outcome.cases,
        "usage": usage,
        "fault_log": outcome.fault_log,
        "run_dir": str(outcome.run_dir),
    }


def markdown(report: dict[str, Any]) -> str:
    lat = report["reclaim_latency_seconds"]
    lines = [
        f"# Chaos run: seed {report['seed']}, {report['minutes']:g} min",
        "",
        f"Machine: {report['machine']['cpus']} CPUs, load {report['machine']['load_1m']}.",
        "",
        f"- Violations: **{len(report['violations'])}**",
        f"- Signals sent: {report['signals']}; reclaims judged: {report['reclaims']}; "
        f"notices judged by recipient and PID: {report['notices']}",
        f"- Reclaim latency from ground-truth idle (s): median {lat['median']}, "
        f"p90 {lat['p90']}, max {lat['max']}",
        f"- Missed reclaims (idle {report['miss_after_seconds']:g}s or more, never "
        f"reclaimed): {len(report['missed'])}",
        f"- Cases by state: {json.dumps(report['cases'], sort_keys=True)}",
        f"- Workload starts skipped at the live cap: {report['workloads_skipped']}",
        "",
        "| workloads planned | count |",
        "|---|---|",
        *[f"| {k} | {n} |" for k, n in sorted(report["workloads"].items())],
        "",
        "| faults injected | count |",
        "|---|---|",
        *[f"| {k} | {n} |" for k, n in sorted(report["faults"].items())],
        "",
    ]
    if report["violations"]:
        lines += ["## Violations", ""]
        lines += [f"- `{x['kind']}` at {x['at']:.1f}: {x['detail']}" for x in report["violations"]]
        lines.append("")
    if report["missed"]:
        lines += ["## Missed reclaims", ""]
        lines += [
            f"- {m['label']} (idle {m['idle_for']:.0f}s): {m['why']}" for m in report["missed"]
        ]
        lines.append("")
    lines += ["## Components (descriptors, threads, RSS: first and last reading)", ""]
    for name, u in sorted(report["usage"].items()):
        a, b = u["first"], u["last"]
        lines.append(
            f"- {name}: fds {a['fds']} -> {b['fds']}, threads {a['threads']} -> {b['threads']}, "
            f"RSS {a['rss'] / 2**20:.0f} -> {b['rss'] / 2**20:.0f} MiB ({u['readings']} readings)"
        )
    return "\n".join(lines) + "\n"


def write(outcome: Outcome, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    report = summary(outcome)
    (out / "chaos.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "chaos.md").write_text(markdown(report), encoding="utf-8")
    return report
