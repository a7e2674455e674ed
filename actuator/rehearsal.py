"""A rehearsed escalation step: what observe and notify modes send a node instead of a
signal (a dry run, each tree member verified as for a real one, nothing sent)."""

from __future__ import annotations

from dataclasses import dataclass

from actuator.models import Member, Target


@dataclass(frozen=True)
class Rehearsal:
    """The tree the signal would go to. `key` names the case's step for an agent that
    takes rehearsals one at a time (as dry-run signal steps)."""

    target: Target
    members: tuple[Member, ...]
    signal: str  # the ladder's signal name (SIGTERM)
    key: str = ""
