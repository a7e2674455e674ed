"""The simulated workloads' phase programs: parsed strictly, and which phase runs when,
cues included (a cue ends its phase whenever it comes, and an early one is not lost)."""

from __future__ import annotations

import pytest

from exporter.sim.phases import parse_phases, phase_at


def test_phase_program() -> None:
    phases = parse_phases("load=10s,busy=1m,idle")
    assert [p.name for p in phases] == ["load", "busy", "idle"]
    assert phase_at(phases, 5).phase.name == "load"
    assert phase_at(phases, 30).phase.name == "busy"
    assert phase_at(phases, 10_000).phase.name == "idle"
    for bad in (
        "",
        "sleep=1s",
        "busy,idle",
        "busy=abc,idle",
        "done,busy",
        "busy=1s,done=1s",
        "busy=cue",
    ):
        with pytest.raises(ValueError):
            parse_phases(bad)


def test_a_cue_phase_lasts_until_its_cue_and_an_early_cue_is_not_lost() -> None:
    phases = parse_phases("busy=3s,idle=cue,busy=2s,hang=cue,busy")
    assert phase_at(phases, 1_000).phase.name == "idle"  # no cue: idle for ever
    at = phase_at(phases, 11.5, cues=(10.0,))
    assert (at.phase.name, at.elapsed_in_phase) == ("busy", 1.5)
    assert phase_at(phases, 13, cues=(10.0,)).phase.name == "hang"
    assert phase_at(phases, 13, cues=(10.0, 11.0)).phase.name == "busy"  # second cue, early
    assert phase_at(phases, 2, cues=(1.0,)).phase.name == "busy"  # cued during busy=3s ...
    assert phase_at(phases, 3.5, cues=(1.0,)).phase.name == "busy"  # ... idle=cue is skipped
