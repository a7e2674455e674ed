"""After a reclaim: did anyone take the GPU, and was it the one it was freed for? A pure
judgement of the GPU's process list.

Every reclaimed GPU is watched for `window`. Only a process that was on the GPU neither as
the reclaimed tree nor beside it at the reclaim (`present`: a kept process, one nobody may
reclaim) can be its next holder. For a reclaim on demand whose request names its own
process (`claimant`: the waiter's uid, the Slurm job, the pod), the hand-off is proven only
when such a process holds the GPU; another's holding it, or nobody's within the window,
makes it a needless reclaim. A request that names no process (a PromQL pool) is only ever
"taken". An unreadable process list proves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from actuator.demand.model import Claimant


@dataclass(frozen=True)
class Watched:
    case: int
    node: str
    gpu: str  # UUID
    trigger: Literal["idle", "demand"]
    request: str | None  # Request.ref it was reclaimed for (demand)
    freed_mono: float
    freed_pids: frozenset[int]  # the reclaimed tree: not a new holder if still listed
    present: frozenset[int] = frozenset()  # beside it at the reclaim: never a new holder
    claimant: Claimant | None = None  # whose process proves the hand-off (demand)
    who: str = ""  # the request, for people


@dataclass(frozen=True)
class Outcome:
    kind: Literal["handed_off", "taken", "needless", "unknown"]
    seconds: float  # from the GPU being free to the outcome
    holders: tuple[int, ...] = ()  # the new holders (for needless: others, not the claimant)


def new_holders(w: Watched, listed: dict[int, int] | None) -> tuple[int, ...]:
    """Processes on the GPU that were not there at the reclaim."""
    if listed is None:
        return ()
    return tuple(sorted(p for p in listed if p not in w.freed_pids and p not in w.present))


def needs_proof(w: Watched) -> bool:
    return w.trigger == "demand" and w.claimant is not None


def judge(
    w: Watched,
    listed: dict[int, int] | None,
    mono: float,
    window: float,
    claimants: frozenset[int] = frozenset(),
) -> Outcome | None:
    """The outcome once there is one; None: keep watching. `claimants`: the new holders
    proven to be the request's own processes (asked of the node by the caller)."""
    waited = max(0.0, mono - w.freed_mono)
    new = new_holders(w, listed)
    if needs_proof(w):
        proven = tuple(p for p in new if p in claimants)
        if proven:
            return Outcome("handed_off", waited, proven)
    elif new:
        return Outcome("taken", waited, new)
    if waited < window:
        return None
    return Outcome("needless" if listed is not None else "unknown", waited, new)


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
