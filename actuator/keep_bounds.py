"""What an owner may keep, judged the same way whichever way they ask (pure): the rule's
[keep_min, keep_max], and a repeat step that holds the owner's keeps for an SRE.

`keep_refusal` judges a keep asked of a case or in advance (actuator/owner_actions.py);
`owner_allowance` judges what the process asked itself to be kept for
(`GPU_RECLAIMER_KEEP`, a pod's keep annotation), read on the node; `recorded_rule` is the
rule a case was judged by.
"""

from __future__ import annotations

from dataclasses import dataclass

from actuator.models import Case
from actuator.policy import Effective
from exporter.text import clean
from exporter.units import format_duration, parse_duration


@dataclass(frozen=True)
class Allowance:
    """What an owner's GPU_RECLAIMER_KEEP is worth under a rule: the runtime before which
    the process is not judged idle (0 when none was asked or it was refused), and why."""

    seconds: float
    note: str


def owner_allowance(asked: str | None, eff: Effective) -> Allowance:
    """The owner's ask, read from the process's environment (or its pod's annotation) on
    the node, judged as every owner's keep is: against the rule's [keep_min, keep_max], and
    refused while a repeat step holds the owner's keeps for an SRE (pure). A refusal names
    the bounds or the step."""
    if asked is None:
        return Allowance(0.0, "")
    where, _, value = asked.partition("=")
    bounds = f"{format_duration(eff.keep_min)} to {format_duration(eff.keep_max)}"
    try:
        seconds = parse_duration(value.strip())
    except ValueError:
        return Allowance(0.0, f"{where}={clean(value, 40)} is not a duration: ignored")
    if eff.keep_needs_sre:
        return Allowance(
            0.0,
            f"{where}={format_duration(seconds)} refused: after {eff.repeat_prior} reclaims "
            "of your jobs, keeping needs an SRE's approval",
        )
    if not eff.keep_min <= seconds <= eff.keep_max:
        return Allowance(
            0.0,
            f"{where}={format_duration(seconds)} refused: rule {eff.rule} allows {bounds}",
        )
    return Allowance(seconds, f"{where}={format_duration(seconds)} granted ({bounds})")


def recorded_rule(case: Case) -> Effective | None:
    """The rule the reconciler recorded on the case (None before its first decision, or
    when another version recorded it)."""
    try:
        return Effective.model_validate(case.effective) if case.effective else None
    except ValueError:
        return None


def keep_refusal(eff: Effective, seconds: float) -> str | None:
    """Why an owner's keep of `seconds` is refused: outside the rule's [keep_min, keep_max]
    (the same bounds as GPU_RECLAIMER_KEEP's), or held for an SRE by a repeat step; None
    when it may be kept (pure)."""
    if eff.keep_needs_sre:
        return (
            f"after {eff.repeat_prior} reclaims of your jobs, keeping needs an SRE's "
            "approval: ask them to snooze the case"
        )
    if eff.keep_min <= seconds <= eff.keep_max:
        return None
    return (
        f"rule {eff.rule} lets owners keep a process for {format_duration(eff.keep_min)} "
        f"to {format_duration(eff.keep_max)}, not {format_duration(seconds)}"
    )
