"""Why a case went where it did: each decision with the live evidence and the thresholds it
was judged on (`gpu-reclaimer why CASE`, GET /api/v1/cases/<id>/why).

Pure: reads the case and its timeline as the store keeps them (the evidence is kept with
the case for `storage.retention`), writes nothing. Every fact shown is what the node proved
at that re-check; what the alert claimed is not evidence and is not shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from actuator.decision_record import StepEvidence
from actuator.keep_bounds import owner_allowance
from actuator.models import Case
from actuator.notifications.untrusted import plain
from actuator.policy import Effective
from exporter.units import format_duration

GiB = 1024**3


@dataclass(frozen=True)
class Step:
    """One decision: when, the state it led to, why, and what the node showed then."""

    at: float
    state: str
    reason: str
    evidence: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "state": self.state,
            "reason": self.reason,
            "evidence": list(self.evidence),
        }


@dataclass(frozen=True)
class Explanation:
    case_id: int
    headline: str
    steps: tuple[Step, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case_id,
            "headline": self.headline,
            "steps": [s.to_json() for s in self.steps],
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Explanation:
        steps = tuple(
            Step(
                at=float(s["at"]),
                state=str(s["state"]),
                reason=str(s["reason"]),
                evidence=tuple(str(e) for e in s["evidence"]),
            )
            for s in body["steps"]
        )
        return cls(int(body["case"]), str(body["headline"]), steps)

    def render(self) -> str:
        lines = [self.headline]
        for step in self.steps:
            when = datetime.fromtimestamp(step.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            lines.append(f"  {when}  {step.state}: {step.reason}")
            lines.extend(f"      {fact}" for fact in step.evidence)
        return "\n".join(lines)


def explain(case: Case, timeline: list[dict[str, Any]]) -> Explanation:
    """The case's decisions in order, each with the facts its re-check read."""
    steps = []
    previous: tuple[float, float] | None = None  # (time, CPU seconds) of the last re-check
    for entry in timeline:
        evidence = StepEvidence.from_json(entry.get("evidence"))
        live = evidence.live if evidence is not None else None
        at = float(entry["ts"])
        facts: list[str] = []
        if live is not None:
            assert evidence is not None
            facts = _facts(live, evidence.thresholds or {}, at, previous)
            cpu = live.get("cpu_seconds")
            if isinstance(cpu, int | float):
                previous = (at, float(cpu))
        # Users chose their command lines (and so parts of reasons and errors): one clean
        # line each, no terminal escapes or bidi controls, before anyone reads them.
        reason = plain(entry.get("reason") or "")
        steps.append(Step(at, plain(entry["state"]), reason, tuple(plain(f) for f in facts)))
    return Explanation(case.id, _headline(case), tuple(steps))


def _headline(case: Case) -> str:
    facts = case.facts or {}
    command = plain(facts.get("program") or facts.get("cmdline") or "process", limit=120)
    gpu = facts.get("gpu_index")
    where = f"{case.node} GPU {gpu}" if gpu is not None else f"{case.node} {case.uuid}"
    who = ", ".join(
        part
        for part in (facts.get("user") or case.user, _project(facts.get("project") or case.project))
        if part
    )
    # The state only: its reason is the last step's, said there in full (a headline that
    # carried it too was cut short and then repeated).
    return plain(
        f"case {case.id}: {command} (PID {case.pid}{', ' + who if who else ''}) on {where}, "
        f"alert {case.alertname}: now {case.state}"
    )


def _project(project: str | None) -> str:
    return f"project {project}" if project else ""


def _facts(
    live: dict[str, Any],
    thresholds: dict[str, Any],
    at: float,
    previous: tuple[float, float] | None,
) -> list[str]:
    if live.get("exists") is False:
        return ["the process no longer existed"]
    facts = []
    if live.get("protected"):
        facts.append(f"protected: {live['protected']}")
    util, util_max = live.get("sm_util"), thresholds.get("max_sm_util")
    if isinstance(util, int | float):
        facts.append(f"SM utilisation {util:.0%}" + _limit(util_max, "{:.0%}"))
    else:
        facts.append(f"SM utilisation unknown ({live.get('util_unknown') or 'not reported'})")
    memory = live.get("gpu_memory_bytes")
    if isinstance(memory, int | float):
        facts.append(f"GPU memory held {memory / GiB:.1f} GiB")
    cpu = live.get("cpu_seconds")
    if isinstance(cpu, int | float) and previous is not None and at > previous[0]:
        cores = max(0.0, (cpu - previous[1]) / (at - previous[0]))
        facts.append(
            f"process tree CPU {cores:.2f} cores since the re-check before"
            + _limit(thresholds.get("max_cpu_cores"), "{:.2f} cores")
        )
    quiet_for = thresholds.get("log_quiet_for")
    for name, key in (("log written", "log_mtime"), ("heartbeat", "heartbeat")):
        stamp = live.get(key)
        if isinstance(stamp, int | float):
            ago = format_duration(max(0.0, at - stamp))
            needed = (
                f" (quiet needed: {format_duration(quiet_for)})"
                if isinstance(quiet_for, int | float) and key == "log_mtime"
                else ""
            )
            facts.append(f"{name} {ago} before{needed}")
        else:
            facts.append(f"no {name.split()[0]} seen")
    facts.extend(_network_facts(live, at))
    asked = live.get("keep_asked")
    if isinstance(asked, str):
        facts.append(f"its owner asked: {_allowance_note(asked, thresholds)}")
    members = live.get("members") or []
    if len(members) > 1:
        facts.append(f"process tree of {len(members)} processes")
    facts.extend(f"could not read: {error}" for error in live.get("errors") or [])
    return facts


def _allowance_note(asked: str, thresholds: dict[str, Any]) -> str:
    """The ask judged as the decision judged it: by the rule's bounds then in force."""
    try:
        rule = Effective.model_validate(
            {k: v for k, v in thresholds.items() if k in Effective.model_fields}
        )
    except ValueError:
        return f"{asked} (the rule's bounds were not recorded)"
    return owner_allowance(asked, rule).note


def _limit(value: object, fmt: str) -> str:
    return f" (idle at most {fmt.format(value)})" if isinstance(value, int | float) else ""


def _network_facts(live: dict[str, Any], at: float) -> list[str]:
    """What the re-check read of the tree's sockets (nothing where it read none)."""
    if live.get("network_unknown"):
        return [f"its network unknown ({live['network_unknown']})"]
    external = live.get("listening_external")
    if not isinstance(external, int):
        return []
    ports = live.get("listen_ports") or []
    facts = []
    if external:
        facts.append(f"listens where other hosts reach it (ports {ports})")
        clients, ago = live.get("network_clients"), live.get("client_ago")
        if isinstance(clients, int) and clients:
            facts.append(f"{clients} client connection(s) open")
        elif isinstance(ago, int | float):
            facts.append(f"a client last connected {format_duration(ago)} before")
        else:
            facts.append("no client seen")
    elif live.get("listening_rendezvous"):
        facts.append(f"listens only on its own rendezvous ports (ports {ports}): no service")
    elif ports:
        facts.append(f"listens on loopback only (ports {ports}): no service")
    watched = live.get("network_watched_for")
    if live.get("network_covered") is False and isinstance(watched, int | float):
        facts.append(f"its network watched for only {format_duration(watched)}: not yet known")
    moved = live.get("network_activity")
    if isinstance(moved, int | float):
        ago = format_duration(max(0.0, at - moved))
        facts.append(f"data beyond keep-alive moved on its connections {ago} before")
    return facts
