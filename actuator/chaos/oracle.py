"""Pure: every signal of a run judged against the ground truth, and what the run shows.

A violation is something the product promises never to do: signal a process that was not
idle (or hung) by the node's ground truth for the policy's window, or one that is
protected, or one the run never started, or one on another node than its case names; send
the same step twice; signal without a
delivered notice; call a case reclaimed while its process still holds the GPU; let a
component's file descriptors, threads or memory grow without bound. A missed reclaim (idle
by ground truth long enough, never reclaimed) is not a violation (unknown is never idle:
a fault may rightly hold a reclaim back); the report lists each with why."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actuator.audit import Event
from actuator.chaos.plan import NEVER_IDLE, Kind
from actuator.chaos.truth import Timeline, Truth

SLACK = 1.0  # seconds: the truth is sampled every 0.2 s, processes report every 0.25 s


@dataclass(frozen=True)
class Spawned:
    label: str
    kind: Kind
    pid: int
    started_at: float  # when the run launched it (unix seconds)
    owner: str = ""  # who the notice must reach (its account's chat id)


@dataclass(frozen=True)
class Acknowledged:
    """An alert episode the actuator answered 2xx for (a row of its store)."""

    fingerprint: str
    first_seen: float
    status: str  # firing | resolved
    ends_ts: float | None
    processed: bool
    case_id: int | None


@dataclass(frozen=True)
class Told:
    """One notice as the channel received it: which case, and whom it mentioned."""

    at: float
    case: int
    mentioned: str
    pid: int | None  # the PID the notice says it is about


@dataclass(frozen=True)
class Violation:
    kind: str
    at: float
    detail: str
    case: int | None = None


@dataclass(frozen=True)
class Reclaim:
    label: str
    case: int
    idle_since: float
    signalled_at: float

    @property
    def latency(self) -> float:
        return self.signalled_at - self.idle_since


@dataclass(frozen=True)
class Missed:
    label: str
    idle_for: float
    why: str


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    reclaims: list[Reclaim] = field(default_factory=list)
    missed: list[Missed] = field(default_factory=list)
    signals: int = 0
    notices: int = 0  # notices the owners' channel received, each judged by whom it reached


@dataclass(frozen=True)
class Usage:
    """One reading of a component's process tree."""

    at: float
    fds: int
    threads: int
    rss: int


def _spawned_for(line: Timeline, spawned: Sequence[Spawned]) -> Spawned | None:
    started = line.samples[0][0] if line.samples else 0.0
    found = [s for s in spawned if s.pid == line.pid and s.started_at <= started + SLACK]
    return max(found, key=lambda s: s.started_at) if found else None


def judge(
    records: Iterable[Mapping[str, Any]],
    truth: Truth,
    spawned: Sequence[Spawned],
    *,
    window: float,
    miss_after: float,
    end: float,
    told: Sequence[Told] = (),
) -> Verdict:
    """`window`: how long a process must have idled by ground truth before any signal;
    `miss_after`: how long idle without a reclaim counts as missed (by `end`); `told`: the
    notices the owners' channel received, each judged by whom it reached."""
    verdict = Verdict()
    decisions: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    delivered: dict[int, float] = {}
    sent: dict[tuple[int, int, str], int] = {}  # (pid, ticks, signal) -> case
    signalled: set[tuple[int, int]] = set()
    for record in sorted(records, key=lambda r: float(r.get("ts", 0.0))):
        event, case, ts = record.get("event"), record.get("case"), float(record.get("ts", 0.0))
        if event == Event.DECISION and isinstance(case, int):
            decisions[case].append(record)
        elif event == Event.NOTICE and isinstance(case, int) and record.get("delivered"):
            delivered.setdefault(case, ts)
        elif event == Event.SIGNALS and isinstance(case, int):
            for result in record.get("results") or []:
                if result.get("sent"):
                    verdict.signals += 1
                    first = decisions.get(case)
                    _judge_signal(
                        verdict,
                        truth,
                        spawned,
                        case,
                        str(first[0].get("node") or "") if first else "",
                        ts,
                        int(result["pid"]),
                        str(result.get("signal", "")),
                        window,
                        delivered,
                        sent,
                        signalled,
                    )
    for case, steps in decisions.items():
        for step in steps:
            if step.get("to") == "reclaimed":
                _judge_freed(verdict, truth, case, step)
    _missed(verdict, truth, spawned, decisions, signalled, miss_after, end)
    _judge_recipients(verdict, truth, spawned, decisions, told)
    return verdict


def _judge_recipients(
    verdict: Verdict,
    truth: Truth,
    spawned: Sequence[Spawned],
    decisions: Mapping[int, list[Mapping[str, Any]]],
    told: Sequence[Told],
) -> None:
    """Every notice reaches the owner of the process its case is about, by ground truth."""
    verdict.notices = len(told)
    for notice in told:
        steps = decisions.get(notice.case)
        if not steps or not isinstance(steps[0].get("pid"), int):
            verdict.violations.append(
                Violation(
                    "wrong_person", notice.at, "a notice for a case never decided", notice.case
                )
            )
            continue
        first = steps[0]
        line = truth.timelines.get((first["pid"], int(first.get("start_ticks") or 0)))
        who = _spawned_for(line, spawned) if line is not None else None
        if who is None:
            continue  # not a process of the run: the signal check names it
        if notice.pid != first["pid"]:
            verdict.violations.append(
                Violation(
                    "false_fact",
                    notice.at,
                    f"the notice for {who.label} names PID {notice.pid}, not {first['pid']}",
                    notice.case,
                )
            )
        if notice.mentioned != who.owner:
            verdict.violations.append(
                Violation(
                    "wrong_person",
                    notice.at,
                    f"the notice for {who.label} reached {notice.mentioned or 'nobody'}, "
                    f"not its owner {who.owner}",
                    notice.case,
                )
            )


def _judge_signal(
    verdict: Verdict,
    truth: Truth,
    spawned: Sequence[Spawned],
    case: int,
    node: str,
    ts: float,
    pid: int,
    signal: str,
    window: float,
    delivered: Mapping[int, float],
    sent: dict[tuple[int, int, str], int],
    signalled: set[tuple[int, int]],
) -> None:
    def wrong(kind: str, detail: str) -> None:
        verdict.violations.append(Violation(kind, ts, f"{signal} to PID {pid}: {detail}", case))

    line = truth.by_pid(pid, ts)
    if line is None:
        wrong("unknown_process", "a process the run never started")
        return
    job = truth.owner(line, ts)
    who = _spawned_for(job, spawned)
    if who is None:
        wrong("unknown_process", "not a process of this run's workloads")
        return
    signalled.add((job.pid, job.ticks))
    if node and line.node and line.node != node:
        wrong("wrong_node", f"{who.label} runs on {line.node}; the case is for {node}")
    key = (line.pid, line.ticks, signal)
    if key in sent:
        wrong("step_twice", f"already sent for case {sent[key]}")
    sent[key] = case
    if case not in delivered or delivered[case] > ts:
        wrong("no_notice", "no delivered notice before it")
    if who.kind == "protected":
        wrong("protected", f"{who.label} runs a protected command")
    if who.kind in NEVER_IDLE:
        wrong("not_idle", f"{who.label} was working ({who.kind})")
        return
    since = job.idle_since(ts + SLACK)
    if since is None:
        wrong("not_idle", f"{who.label} was {job.phase_at(ts)} by ground truth")
    elif ts - since < window - SLACK:
        wrong("not_idle", f"{who.label} had idled {ts - since:.1f}s, not the {window:g}s window")
    elif signal == "SIGTERM" and line is job:
        verdict.reclaims.append(Reclaim(who.label, case, since, ts))


def _judge_freed(verdict: Verdict, truth: Truth, case: int, step: Mapping[str, Any]) -> None:
    ts, pid, ticks = float(step.get("ts", 0.0)), step.get("pid"), step.get("start_ticks")
    line = truth.timelines.get((int(pid), int(ticks))) if pid is not None and ticks else None
    if line is not None and line.last_seen > ts + 2 * SLACK:
        verdict.violations.append(
            Violation(
                "not_freed",
                ts,
                f"case {case} reclaimed, but PID {pid} held its GPU "
                f"{line.last_seen - ts:.1f}s later",
                case,
            )
        )


def _missed(
    verdict: Verdict,
    truth: Truth,
    spawned: Sequence[Spawned],
    decisions: Mapping[int, list[Mapping[str, Any]]],
    signalled: set[tuple[int, int]],
    miss_after: float,
    end: float,
) -> None:
    last_word: dict[int, str] = {}
    for steps in decisions.values():
        for step in steps:
            if isinstance(step.get("pid"), int):
                to = step.get("to") or step.get("from") or "?"
                last_word[step["pid"]] = f"case {step.get('case')}: {to}: {step.get('reason')}"
    for line in truth.timelines.values():
        if line.parent is not None or (line.pid, line.ticks) in signalled:
            continue
        who = _spawned_for(line, spawned)
        if who is None or who.kind in NEVER_IDLE or who.kind == "protected":
            continue
        until = min(end, line.last_seen)
        since = line.idle_since(until)
        if since is not None and until - since >= miss_after:
            why = last_word.get(line.pid, "no case: no alert reached the actuator")
            verdict.missed.append(Missed(who.label, until - since, why))


def unrecorded(
    acknowledged: Iterable[Acknowledged],
    records: Iterable[Mapping[str, Any]],
    *,
    end: float,
    within: float = 15.0,
) -> list[Violation]:
    """Every firing alert the actuator acknowledged `within` seconds before the end has
    reached a case with a recorded decision (the stale and the resolved need none)."""
    decided = {r.get("case") for r in records if r.get("event") == Event.DECISION}
    found = []
    for ep in acknowledged:
        if ep.status != "firing" or ep.first_seen > end - within:
            continue
        if ep.ends_ts is not None and ep.ends_ts <= ep.first_seen:
            continue  # stale when it came: ignored by design
        if not ep.processed or ep.case_id is None or ep.case_id not in decided:
            found.append(
                Violation(
                    "lost_decision",
                    ep.first_seen,
                    f"alert {ep.fingerprint} acknowledged, processed={ep.processed}, "
                    f"case {ep.case_id}: no recorded decision",
                    ep.case_id,
                )
            )
    return found


def leaks(
    usage: Mapping[str, Sequence[Usage]],
    *,
    settle: float = 20.0,
    fds: int = 25,
    threads: int = 20,
    rss_ratio: float = 1.5,
    rss_slack: int = 64 * 2**20,
) -> list[Violation]:
    """A component whose descriptors, threads or memory grew past the tolerance between its
    first readings after `settle` seconds of life and its last ones (medians of three)."""
    found = []
    for name, readings in usage.items():
        if len(readings) < 8:
            continue
        start = readings[0].at + settle
        settled = [r for r in readings if r.at >= start]
        if len(settled) < 6:
            continue
        first, last = settled[:3], settled[-3:]

        def median(values: list[int]) -> int:
            return sorted(values)[1]

        grew = {
            "fds": (median([r.fds for r in first]), median([r.fds for r in last])),
            "threads": (median([r.threads for r in first]), median([r.threads for r in last])),
            "rss": (median([r.rss for r in first]), median([r.rss for r in last])),
        }
        limits = {
            "fds": grew["fds"][0] + fds,
            "threads": grew["threads"][0] + threads,
            "rss": max(int(grew["rss"][0] * rss_ratio), grew["rss"][0] + rss_slack),
        }
        for what, (a, b) in grew.items():
            if b > limits[what]:
                found.append(
                    Violation(
                        "leak", settled[-1].at, f"{name}: {what} {a} -> {b} (limit {limits[what]})"
                    )
                )
    return found
