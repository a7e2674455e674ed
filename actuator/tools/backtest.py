"""What a rule change would have done: candidate alert rules evaluated over the history
Prometheus holds, side by side with a baseline (the shipped rules).

Prometheus does the evaluating. Each alert's expression is written out in full (every
recording rule it uses replaced by that rule's own expression, recursively), so the
candidate thresholds apply all the way down rather than the recorded series Prometheus
stored with the old ones; `for:` becomes a subquery that requires the condition at every
step of the hold time. One range query per alert and rule set, through any object with
prometheus-api-client's `custom_query_range`.

Evaluation is at a fixed step (default 60 s, like a rule group's interval). A process counts
as flagged at a step when the alert would have been firing there; its flagged time is the
number of such steps times the step.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from actuator.prometheus_api import RangeQueries
from actuator.promql_duration import format_promql_duration, parse_promql_duration
from exporter import config_errors

GiB = 1024**3
MAX_POINTS = 10_000  # Prometheus refuses range queries of more than 11,000 points
# A process is one series of the alert: these labels tell processes apart.
PROCESS_KEY = ("instance", "gpu", "uuid", "pid", "start_ticks")
SHOWN_LABELS = ("node", "gpu", "pid", "user", "project", "command")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_COMPARISON = r"(?:<=|>=|==|!=|<|>)(?:\s*bool)?"
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"


_FIRST_NAME = re.compile(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)")


def _labels(rule: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (rule.get("labels") or {}).items()}


def _recorded(parts: list[tuple[str, dict[str, str]]]) -> str:
    """What a recorded name stands for: its rule's expression; for a name several rules
    record (each with its own static labels, as Prometheus allows), the union of theirs,
    each with its labels set as the rule's `labels:` would set them."""
    if len(parts) == 1:
        return parts[0][0]
    labelled = []
    for expr, labels in parts:
        for key, value in labels.items():
            # label_replace's replacement expands `$1`: `$$` is a literal `$`
            literal = json.dumps(value.replace("$", "$$"))
            expr = f'label_replace(\n{expr}\n, {json.dumps(key)}, {literal}, "", "")'
        labelled.append(f"(\n{expr}\n)")
    return "\nor\n".join(labelled)


class BacktestError(Exception):
    """A rules file or an override the backtest cannot use; the message says why."""


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    hold_s: float
    labels: dict[str, str]


@dataclass(frozen=True)
class RuleSet:
    origin: str
    records: dict[str, str]
    alerts: dict[str, Alert]

    @classmethod
    def load(cls, path: Path) -> RuleSet:
        try:
            data = config_errors.read_yaml(path)
        except config_errors.YamlFileError as exc:
            raise BacktestError(f"rules file {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
            raise BacktestError(f"{path}: not a Prometheus rules file (no `groups:` list)")
        parts: dict[str, list[tuple[str, dict[str, str]]]] = {}
        alert_rules: list[dict[str, Any]] = []
        for group in data["groups"]:
            for rule in (group or {}).get("rules") or []:
                if "record" in rule:
                    name, labels = rule["record"], _labels(rule)
                    if any(seen == labels for _, seen in parts.get(name, [])):
                        raise BacktestError(f"{path}: {name} is recorded twice with one label set")
                    parts.setdefault(name, []).append((str(rule["expr"]), labels))
                elif "alert" in rule:
                    alert_rules.append(rule)
        records = {name: _recorded(found) for name, found in parts.items()}
        # A name recorded once keeps its static labels apart (an alert inherits them); one
        # recorded by several rules carries them in its expression (_recorded).
        recorded_labels = {
            name: found[0][1] if len(found) == 1 else {} for name, found in parts.items()
        }
        alerts: dict[str, Alert] = {}
        for rule in alert_rules:
            try:
                hold = parse_promql_duration(str(rule.get("for", "0s")))
            except ValueError as exc:
                raise BacktestError(f"{path}: alert {rule['alert']}: for: {exc}") from None
            # An alert carries the labels of the recorded condition its expression starts
            # from (the left side of its joins keeps its labels), then its own.
            first = _FIRST_NAME.match(str(rule["expr"]))
            labels = {**recorded_labels.get(first.group(1) if first else "", {}), **_labels(rule)}
            alerts[rule["alert"]] = Alert(rule["alert"], str(rule["expr"]), hold, labels)
        if not alerts:
            raise BacktestError(f"{path}: no alert rules")
        return cls(str(path), records, alerts)

    def with_thresholds(self, overrides: dict[str, float]) -> RuleSet:
        """Replace the number compared with each named series (`NAME <= 0.05` -> 0.2) in
        every rule that compares it; an override that matches nothing is an error."""
        records, alerts = dict(self.records), dict(self.alerts)
        for name, value in overrides.items():
            pattern = re.compile(rf"(?<![\w:])({re.escape(name)}\s*{_COMPARISON}\s*){_NUMBER}")
            hits = 0

            def replace(text: str, pattern: re.Pattern[str] = pattern, value: float = value) -> str:
                nonlocal hits
                new, n = pattern.subn(lambda m: m.group(1) + repr(value), text)
                hits += n
                return new

            records = {k: replace(v) for k, v in records.items()}
            alerts = {
                k: Alert(a.name, replace(a.expr), a.hold_s, a.labels) for k, a in alerts.items()
            }
            if not hits:
                raise BacktestError(
                    f"no rule in {self.origin} compares {name} with a number "
                    "(use a series name as written before its <, <=, > or >=)"
                )
        return RuleSet(self.origin, records, alerts)

    def with_hold(self, holds: dict[str | None, float]) -> RuleSet:
        """New `for:` durations, per alert name (None: every alert)."""
        for name in holds:
            if name is not None and name not in self.alerts:
                raise BacktestError(f"no alert {name} in {self.origin}")
        alerts = {
            k: Alert(a.name, a.expr, holds.get(k, holds.get(None, a.hold_s)), a.labels)
            for k, a in self.alerts.items()
        }
        return RuleSet(self.origin, self.records, alerts)

    def expanded(self, expr: str, seen: tuple[str, ...] = ()) -> str:
        """`expr` with every recorded series replaced by its rule's expression."""

        def substitute(match: re.Match[str]) -> str:
            name = match.group(0)
            if name not in self.records:
                return name
            after = expr[match.end() :].lstrip()
            if after[:1] in ("{", "["):
                raise BacktestError(
                    f"{self.origin}: {name} is used with a selector or range "
                    f"({name}{after[:12]}...); the backtest can only inline a bare name"
                )
            if name in seen:
                raise BacktestError(
                    f"{self.origin}: recording rules refer to each other: "
                    + " -> ".join((*seen, name))
                )
            inner = self.expanded(self.records[name], (*seen, name))
            return f"(\n{inner}\n)"  # newlines: a `# comment` inside ends before the `)`

        return _outside_strings_and_comments(expr, lambda code: _METRIC_NAME.sub(substitute, code))


def _outside_strings_and_comments(expr: str, change: Callable[[str], str]) -> str:
    """Apply `change` to the code of a PromQL expression, not to its strings and comments."""
    parts = re.split(r'("(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|#[^\n]*)', expr)
    return "".join(part if i % 2 else change(part) for i, part in enumerate(parts))


def firing_query(rules: RuleSet, alert: Alert, step_s: float) -> str:
    """The alert's expression, held for `for:`: present at a step only if the condition was
    present at that step and at every step of the hold time before it (as a rule group
    evaluating every `step_s` would have it firing)."""
    condition = rules.expanded(alert.expr)
    if alert.hold_s <= 0:
        return condition
    steps = math.ceil(alert.hold_s / step_s)
    window = format_promql_duration((steps + 1) * step_s)
    step = format_promql_duration(step_s)
    return (
        f"(\n{condition}\n)\nand\n"
        f"count_over_time((\n{condition}\n)[{window}:{step}]) >= {steps + 1}"
    )


@dataclass
class Flagged:
    """One process the alert would have flagged."""

    labels: dict[str, str]
    minutes: float
    max_memory_gib: float
    memory_gib_hours: float
    first: float
    last: float


@dataclass
class AlertOutcome:
    alert: str
    hold: str
    flagged: dict[tuple[str, ...], Flagged] = field(default_factory=dict)

    @property
    def minutes(self) -> float:
        return sum(f.minutes for f in self.flagged.values())

    @property
    def memory_gib_hours(self) -> float:
        return sum(f.memory_gib_hours for f in self.flagged.values())


@dataclass
class Comparison:
    alert: str
    candidate: AlertOutcome
    baseline: AlertOutcome

    @property
    def newly_flagged(self) -> list[Flagged]:
        return [f for k, f in self.candidate.flagged.items() if k not in self.baseline.flagged]

    @property
    def no_longer_flagged(self) -> list[Flagged]:
        return [f for k, f in self.baseline.flagged.items() if k not in self.candidate.flagged]


def step_for(start: float, end: float, step_s: float) -> float:
    """The step asked for, widened only as far as Prometheus's point limit needs."""
    return max(step_s, math.ceil((end - start) / MAX_POINTS))


def evaluate(
    prom: RangeQueries, rules: RuleSet, alert: Alert, start: float, end: float, step_s: float
) -> AlertOutcome:
    series = prom.custom_query_range(
        firing_query(rules, alert, step_s),
        start_time=datetime.fromtimestamp(start),
        end_time=datetime.fromtimestamp(end),
        step=f"{step_s:g}s",
    )
    outcome = AlertOutcome(alert.name, format_promql_duration(alert.hold_s))
    for one in series:
        labels = {k: str(v) for k, v in one["metric"].items()}
        points = [(float(t), float(v)) for t, v in one["values"]]
        memory = [v for _, v in points if math.isfinite(v)]
        outcome.flagged[tuple(labels.get(k, "") for k in PROCESS_KEY)] = Flagged(
            labels=labels,
            minutes=len(points) * step_s / 60,
            max_memory_gib=max(memory, default=0.0) / GiB,
            memory_gib_hours=sum(memory) * step_s / 3600 / GiB,
            first=points[0][0],
            last=points[-1][0],
        )
    return outcome


def compare(
    prom: RangeQueries,
    candidate: RuleSet,
    baseline: RuleSet,
    alerts: Iterable[str],
    start: float,
    end: float,
    step_s: float,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Comparison]:
    if end <= start:
        raise BacktestError("the period is empty: --until must be after --since")
    step_s = step_for(start, end, step_s)
    found = []
    for name in alerts:
        if name not in candidate.alerts:
            raise BacktestError(f"no alert {name} in {candidate.origin}")
        if name not in baseline.alerts:
            raise BacktestError(f"no alert {name} in {baseline.origin}")
        progress(f"{name}, candidate rules ({int((end - start) // step_s)} steps of {step_s:g}s)")
        mine = evaluate(prom, candidate, candidate.alerts[name], start, end, step_s)
        progress(f"{name}, baseline rules")
        theirs = evaluate(prom, baseline, baseline.alerts[name], start, end, step_s)
        found.append(Comparison(name, mine, theirs))
    return found


def reclaim_alerts(rules: RuleSet) -> list[str]:
    """The alerts the actuator acts on (label reclaim="true")."""
    return [name for name, a in rules.alerts.items() if a.labels.get("reclaim") == "true"]


# -- rendering --------------------------------------------------------------------------------


def _rows(comparisons: list[Comparison]) -> list[dict[str, Any]]:
    rows = []
    for c in comparisons:
        keys = list(dict.fromkeys([*c.candidate.flagged, *c.baseline.flagged]))
        for key in keys:
            mine, theirs = c.candidate.flagged.get(key), c.baseline.flagged.get(key)
            seen = mine or theirs
            assert seen is not None
            change = "both" if mine and theirs else "new" if mine else "no longer"
            rows.append(
                {
                    "alert": c.alert,
                    "change": change,
                    **{k: seen.labels.get(k, "") for k in SHOWN_LABELS},
                    "candidate_minutes": round(mine.minutes, 2) if mine else 0.0,
                    "baseline_minutes": round(theirs.minutes, 2) if theirs else 0.0,
                    "max_memory_gib": round(seen.max_memory_gib, 2),
                    "candidate_gib_hours": round(mine.memory_gib_hours, 3) if mine else 0.0,
                    "baseline_gib_hours": round(theirs.memory_gib_hours, 3) if theirs else 0.0,
                }
            )
    return rows


def _summary(c: Comparison) -> dict[str, Any]:
    return {
        "alert": c.alert,
        "candidate": {
            "for": c.candidate.hold,
            "processes": len(c.candidate.flagged),
            "minutes": round(c.candidate.minutes, 2),
            "memory_gib_hours": round(c.candidate.memory_gib_hours, 3),
        },
        "baseline": {
            "for": c.baseline.hold,
            "processes": len(c.baseline.flagged),
            "minutes": round(c.baseline.minutes, 2),
            "memory_gib_hours": round(c.baseline.memory_gib_hours, 3),
        },
        "newly_flagged": len(c.newly_flagged),
        "no_longer_flagged": len(c.no_longer_flagged),
    }


def render(comparisons: list[Comparison], fmt: str, header: str) -> str:
    rows = _rows(comparisons)
    if fmt == "json":
        document = {
            "period": header,
            "alerts": [_summary(c) for c in comparisons],
            "processes": rows,
        }
        return json.dumps(document, indent=2) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        names = list(rows[0]) if rows else ["alert", "change", *SHOWN_LABELS]
        writer = csv.DictWriter(out, fieldnames=names, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    lines = [header, ""]
    markdown = fmt == "markdown"
    for c in comparisons:
        s = _summary(c)
        lines.append(f"{'### ' if markdown else ''}{c.alert}")
        lines.append(
            f"  candidate (for {s['candidate']['for']}): {s['candidate']['processes']} processes, "
            f"{s['candidate']['minutes']:g} min flagged, "
            f"{s['candidate']['memory_gib_hours']:g} GiB-hours held"
        )
        lines.append(
            f"  baseline  (for {s['baseline']['for']}): {s['baseline']['processes']} processes, "
            f"{s['baseline']['minutes']:g} min flagged, "
            f"{s['baseline']['memory_gib_hours']:g} GiB-hours held"
        )
        lines.append(
            f"  newly flagged: {s['newly_flagged']}, no longer flagged: {s['no_longer_flagged']}"
        )
        lines.append("")
    columns = [
        "alert",
        "change",
        "node",
        "gpu",
        "pid",
        "user",
        "project",
        "command",
        "candidate_minutes",
        "baseline_minutes",
        "max_memory_gib",
    ]
    table = [[str(r[k]) for k in columns] for r in rows]
    if markdown:
        lines.append("| " + " | ".join(columns) + " |")
        lines.append("|" + "---|" * len(columns))
        lines += ["| " + " | ".join(r) + " |" for r in table]
    elif table:
        widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(columns)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(columns, widths, strict=True)))
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in table]
    else:
        lines.append("no process was flagged by either rule set")
    return "\n".join(lines).rstrip() + "\n"
