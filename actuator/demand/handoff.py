"""After a reclaim: did anyone take the GPU? A pure judgement of the GPU's process list.

Every reclaimed GPU is watched for `window`: a process that was not the reclaimed tree's
appearing on it is its next holder (for a reclaim on demand, the proof the hand-off
happened); none within the window makes it a needless reclaim. An unreadable process list
proves neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Watched:
    case: int
    node: str
    gpu: str  # UUID
    trigger: Literal["idle", "demand"]
    request: str | None  # Request.ref it was reclaimed for (demand)
    freed_mono: float
    freed_pids: frozenset[int]  # the reclaimed tree: not a new holder if still listed


@dataclass(frozen=True)
class Outcome:
    kind: Literal["taken", "needless", "unknown"]
    seconds: float  # from the GPU being free to the outcome
    holders: tuple[int, ...] = ()


def judge(w: Watched, listed: dict[int, int] | None, mono: float, window: float) -> Outcome | None:
    """The outcome once there is one; None: keep watching."""
    waited = max(0.0, mono - w.freed_mono)
    if listed is not None:
        new = tuple(sorted(pid for pid in listed if pid not in w.freed_pids))
        if new:
            return Outcome("taken", waited, new)
    if waited < window:
        return None
    return Outcome("needless" if listed is not None else "unknown", waited)


class HandOffWatch:
    """The reclaimed GPUs being watched (in memory: the acting reconciler's)."""

    def __init__(self, window: float, every: float) -> None:
        self.window, self.every = window, every
        self._watched: dict[int, Watched] = {}
        self._checked = float("-inf")

    def add(self, watched: Watched) -> None:
        self._watched[watched.case] = watched

    def due(self, mono: float) -> list[Watched]:
        if not self._watched or mono - self._checked < self.every:
            return []
        self._checked = mono
        return list(self._watched.values())

    def done(self, case: int) -> None:
        self._watched.pop(case, None)

    def __len__(self) -> int:
        return len(self._watched)
