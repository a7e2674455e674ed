"""Thresholds fitted to history: the backtest run over a grid of candidate thresholds and
hold times, judged per project by what the flagged processes did next.

A candidate is judged wrong for a process it flags that resumed work soon after: the alert
stopped while the process lived on, within `resumed_within` of the first firing (the job
came back from a quiet phase; reclaiming it would have cost its owner). A process flagged
until it exited, or idle longer than that, was rightly flagged. Per project the proposal is
the candidate that flags the most process-hours with no wrongly flagged process; where
none is clean, the project has no proposal.

A fitted result refuses thin evidence: a project is fitted only where its history holds at
least `Needs.processes` GPU processes over at least `Needs.hours` of history, and where
some candidate flagged one of them (a grid where nothing was flagged says nothing about
any threshold, and must not fall through to the most aggressive one). Pure except
`tune` and `evidence`, which ask Prometheus.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from actuator.prometheus_api import RangeQueries
from actuator.promql_duration import format_promql_duration
from actuator.tools.backtest import (
    PROCESS_KEY,
    AlertOutcome,
    Flagged,
    RuleSet,
    evaluate,
    step_for,
)
from exporter.units import format_duration

UTIL_SERIES = "gpu_process:sm_utilization_ratio:max_window"
DEFAULT_UTILS = (0.02, 0.05, 0.1, 0.2)
DEFAULT_HOLDS = (300.0, 600.0, 1200.0, 1800.0)
ALERT = "GpuProcessIdle"
_ALIVE_KEY = PROCESS_KEY[:4]  # the memory series has no start_ticks label


@dataclass(frozen=True)
class Candidate:
    util: float
    hold_s: float

    def describe(self) -> str:
        return f"util <= {self.util:g}, for: {format_promql_duration(self.hold_s)}"


@dataclass
class Verdict:
    """What one candidate did to one project's processes."""

    candidate: Candidate
    flagged: int = 0
    wrongly: int = 0  # flagged, then resumed work within `resumed_within`
    process_hours: float = 0.0  # time the rightly flagged processes were flagged
    examples: list[str] = field(default_factory=list)  # the wrongly flagged, for people


@dataclass(frozen=True)
class Evidence:
    """What a project's history holds: its GPU processes, the hours between the first and
    the last sample of any of them, and the process-hours they were seen."""

    processes: int = 0
    hours: float = 0.0
    process_hours: float = 0.0

    def describe(self) -> str:
        return (
            f"{self.processes} GPU process{'es' if self.processes != 1 else ''} over "
            f"{format_duration(round(self.hours * 3600))} of history "
            f"({self.process_hours:.1f} process-hours)"
        )


@dataclass(frozen=True)
class Needs:
    """The least evidence a fitted threshold stands on (`--min-processes`, `--min-history`)."""

    processes: int = 10
    hours: float = 24.0

    def shortfall(self, found: Evidence) -> str | None:
        """Why `found` is too thin to fit on; None when it is enough (pure)."""
        if found.processes >= self.processes and found.hours >= self.hours:
            return None
        return (
            f"not enough evidence: {found.describe()}; a proposal needs at least "
            f"{self.processes} process{'es' if self.processes != 1 else ''} over "
            f"{format_duration(self.hours * 3600)}"
        )


@dataclass(frozen=True)
class Proposal:
    project: str
    best: Verdict | None  # None: no candidate was clean, or the evidence is too thin
    verdicts: tuple[Verdict, ...]
    evidence: Evidence = Evidence()
    refused: str = ""  # why there is no proposal, when the evidence decided it

    @property
    def fitted(self) -> bool:
        """A proposal that stands on enough evidence (whether or not it changes the rule)."""
        return self.best is not None and not self.refused


def judge(
    candidate: Candidate,
    outcome: AlertOutcome,
    alive_until: dict[tuple[str, ...], float],
    resumed_within: float,
    step_s: float,
) -> dict[str, Verdict]:
    """Per project: how many processes the candidate flagged, and how many wrongly (pure)."""
    verdicts: dict[str, Verdict] = {}
    for flagged in outcome.flagged.values():
        project = flagged.labels.get("project") or "(none)"
        verdict = verdicts.setdefault(project, Verdict(candidate))
        verdict.flagged += 1
        if _resumed(flagged, alive_until, resumed_within, step_s):
            verdict.wrongly += 1
            if len(verdict.examples) < 3:
                labels = flagged.labels
                verdict.examples.append(
                    f"{labels.get('user', '?')}'s PID {labels.get('pid', '?')} on "
                    f"{labels.get('node', '?')}"
                )
        else:
            verdict.process_hours += flagged.minutes / 60
    return verdicts


def _resumed(
    flagged: Flagged, alive_until: dict[tuple[str, ...], float], within: float, step_s: float
) -> bool:
    key = tuple(flagged.labels.get(k, "") for k in _ALIVE_KEY)
    lived_on = alive_until.get(key, flagged.last) > flagged.last + step_s
    return lived_on and flagged.last - flagged.first <= within


def propose(
    per_candidate: Sequence[tuple[Candidate, dict[str, Verdict]]],
    evidence: dict[str, Evidence] | None = None,
    needs: Needs = Needs(processes=0, hours=0.0),
    projects: Iterable[str] = (),
) -> list[Proposal]:
    """Per project, the clean candidate that flags the most process-hours; between equals,
    the most aggressive (shorter hold, then higher bar). A candidate that flagged nothing
    in a project is clean there. No proposal where the evidence is thinner than `needs`,
    or where no candidate flagged anything (pure)."""
    evidence = evidence or {}
    names = sorted({p for _, verdicts in per_candidate for p in verdicts} | set(projects))
    proposals = []
    for project in names:
        verdicts = tuple(v.get(project) or Verdict(c) for c, v in per_candidate)
        found = evidence.get(project, Evidence())
        refused = needs.shortfall(found) or (
            ""
            if any(v.flagged for v in verdicts)
            else "no candidate flagged any process: nothing to fit"
        )
        clean = [v for v in verdicts if v.wrongly == 0]
        best = max(
            clean,
            key=lambda v: (round(v.process_hours, 6), -v.candidate.hold_s, v.candidate.util),
            default=None,
        )
        proposals.append(Proposal(project, None if refused else best, verdicts, found, refused))
    return proposals


def grid(utils: Iterable[float], holds: Iterable[float]) -> list[Candidate]:
    """Longest hold and lowest bar first: the cautious candidates lead the table."""
    return [
        Candidate(u, h) for h, u in itertools.product(sorted(holds, reverse=True), sorted(utils))
    ]


def alive_until(
    prom: RangeQueries, start: float, end: float, step_s: float
) -> dict[tuple[str, ...], float]:
    """Per process (instance, gpu, uuid, pid): the last step it held GPU memory."""
    series = prom.custom_query_range(
        "gpu_process_memory_used_bytes",
        start_time=datetime.fromtimestamp(start),
        end_time=datetime.fromtimestamp(end),
        step=f"{step_s:g}s",
    )
    found: dict[tuple[str, ...], float] = {}
    for one in series:
        key = tuple(str(one["metric"].get(k, "")) for k in _ALIVE_KEY)
        if one["values"]:
            found[key] = max(found.get(key, 0.0), float(one["values"][-1][0]))
    return found


def evidence(prom: RangeQueries, start: float, end: float, step_s: float) -> dict[str, Evidence]:
    """Per project: its GPU processes in the period, as `gpu_process_info` shows them."""
    series = prom.custom_query_range(
        "max by (instance, uuid, pid, start_ticks, project) (gpu_process_info)",
        start_time=datetime.fromtimestamp(start),
        end_time=datetime.fromtimestamp(end),
        step=f"{step_s:g}s",
    )
    seen: dict[str, tuple[int, float, float, int]] = {}  # processes, first, last, samples
    for one in series:
        stamps = [float(t) for t, _ in one["values"]]
        if not stamps:
            continue
        project = str(one["metric"].get("project") or "(none)")
        count, first, last, samples = seen.get(project, (0, stamps[0], stamps[0], 0))
        seen[project] = (
            count + 1,
            min(first, stamps[0]),
            max(last, stamps[-1]),
            samples + len(stamps),
        )
    return {
        project: Evidence(count, (last - first) / 3600, samples * step_s / 3600)
        for project, (count, first, last, samples) in seen.items()
    }


def tune(
    prom: RangeQueries,
    rules: RuleSet,
    candidates: Sequence[Candidate],
    start: float,
    end: float,
    step_s: float,
    resumed_within: float,
    project: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
    needs: Needs = Needs(),
) -> list[Proposal]:
    """Every candidate evaluated by Prometheus over the period, judged per project."""
    step_s = step_for(start, end, step_s)
    progress("which GPU processes each project ran")
    found = evidence(prom, start, end, step_s)
    progress("when each process last held GPU memory")
    alive = alive_until(prom, start, end, step_s)
    per_candidate = []
    for number, candidate in enumerate(candidates, 1):
        progress(f"candidate {number} of {len(candidates)}: {candidate.describe()}")
        tuned = rules.with_thresholds({UTIL_SERIES: candidate.util}).with_hold(
            {ALERT: candidate.hold_s}
        )
        outcome = evaluate(prom, tuned, tuned.alerts[ALERT], start, end, step_s)
        verdicts = judge(candidate, outcome, alive, resumed_within, step_s)
        if project is not None:
            verdicts = {project: verdicts.get(project, Verdict(candidate))}
        per_candidate.append((candidate, verdicts))
    asked = (project,) if project is not None else ()
    return propose(per_candidate, found, needs, asked)


def rules_diff(text: str, origin: str, candidate: Candidate) -> tuple[str, str]:
    """(the rules file with the candidate's threshold and hold, a unified diff of it):
    only the numbers change, comments and layout stay (pure)."""
    util = re.compile(rf"(?<![\w:])({re.escape(UTIL_SERIES)}\s*<=\s*)[-+.\deE]+")
    tuned = util.sub(lambda m: m.group(1) + f"{candidate.util:g}", text)
    hold = re.compile(rf"(- alert: {ALERT}\n(?:(?!\s*- alert:).*\n)*?\s*for: )\S+")
    tuned = hold.sub(lambda m: m.group(1) + format_promql_duration(candidate.hold_s), tuned)
    diff = difflib.unified_diff(
        text.splitlines(keepends=True),
        tuned.splitlines(keepends=True),
        fromfile=f"a/{origin}",
        tofile=f"b/{origin}",
    )
    return tuned, "".join(diff)


def render(proposals: Sequence[Proposal]) -> str:
    """A table per project: every candidate, and the proposal."""
    lines = []
    for p in proposals:
        lines.append(f"project {p.project}:")
        lines.append(
            f"  {'candidate':<28} {'flagged':>8} {'resumed soon':>13} {'frees proc-h':>12}"
        )
        for v in p.verdicts:
            mark = " <- proposed" if v is p.best else ""
            lines.append(
                f"  {v.candidate.describe():<28} {v.flagged:>8} {v.wrongly:>13} "
                f"{v.process_hours:>12.2f}{mark}"
            )
            if v.examples and v is not p.best:
                lines.append(f"    resumed soon after: {', '.join(v.examples)}")
        lines.append(f"  evidence: {p.evidence.describe()}")
        if p.refused:
            lines.append(f"  {p.refused}: no proposal")
        elif p.best is None:
            lines.append("  no candidate flagged only processes that stayed idle: no proposal")
        lines.append("")
    return "\n".join(lines)
