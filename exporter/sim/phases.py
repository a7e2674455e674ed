"""The phase program of a simulated workload: ``load=10s,busy=1m,idle``; a program that ends
in ``done`` exits by itself (a job that finished). A phase written ``idle=cue`` lasts until the
process is cued (SIGUSR1): tests move a workload on when they observe an event (its notice
arrived), never after a fixed duration that a loaded machine can outrun."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from exporter.units import parse_duration

PhaseName = Literal["load", "busy", "idle", "hang", "done"]
PHASES: tuple[PhaseName, ...] = ("load", "busy", "idle", "hang", "done")
CUE = "cue"  # as a duration: until the next cue (SIGUSR1)


@dataclass(frozen=True)
class Phase:
    name: PhaseName
    seconds: float | None  # None: lasts forever (the last phase) or until a cue
    until_cue: bool = False


@dataclass(frozen=True)
class PhaseAt:
    phase: Phase
    elapsed_in_phase: float


def parse_phases(spec: str) -> tuple[Phase, ...]:
    """Parse a comma list; every phase but the last needs a duration, the last lasts forever."""
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if not items:
        raise ValueError("--phases is empty: give e.g. busy=30s,idle")
    phases = []
    for position, item in enumerate(items):
        name, _, duration = item.partition("=")
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r} in {spec!r}: use {', '.join(PHASES)}")
        is_last = position == len(items) - 1
        if name == "done" and (duration or not is_last):
            raise ValueError(f"`done` ends the program: last, without a duration, in {spec!r}")
        if not duration and not is_last:
            raise ValueError(f"phase {item!r} needs a duration (only the last lasts forever)")
        if duration == CUE:
            if is_last:
                raise ValueError(f"the last phase lasts forever; `{CUE}` needs a next phase")
            phases.append(Phase(name, None, until_cue=True))
            continue
        seconds = None if is_last else parse_duration(duration)
        phases.append(Phase(name, seconds))
    return tuple(phases)


def phase_at(phases: tuple[Phase, ...], elapsed: float, cues: tuple[float, ...] = ()) -> PhaseAt:
    """Which phase runs ``elapsed`` seconds after the start, and for how long it has.

    ``cues`` are the times (seconds after the start) the process was cued: the n-th cue ends
    the n-th cue phase, when it comes or, if it came early, as soon as that phase begins (a
    cue is never lost)."""
    start = 0.0
    pending = iter(sorted(cues))
    for phase in phases:
        if phase.until_cue:
            cue = next(pending, None)
            if cue is None or elapsed < max(start, cue):
                return PhaseAt(phase, elapsed - start)
            start = max(start, cue)
            continue
        if phase.seconds is None or elapsed < start + phase.seconds:
            return PhaseAt(phase, elapsed - start)
        start += phase.seconds
    last = phases[-1]
    return PhaseAt(last, elapsed - start)
