"""Which idle processes serve which waiting request: a pure function of the demand, the
candidates and the clock (nothing here performs I/O).

Fit: a request for N whole GPUs is served only on one node it may run on, by the GPUs its
scheduler counts free there and enough reclaimed GPUs beside them, each held by reclaimable
candidates alone (a GPU that also holds a process nobody may reclaim, or whose process list
is unknown, frees nothing whole); a request for memory by one GPU whose candidates together
hold at least that much (on the GPUs it names, where it names some). Requests are served
oldest first, a suspended job its owner asked back before all (`first`); a GPU already
being reclaimed for a request keeps serving it, so nothing is reclaimed twice for the same
wait. If the candidates cannot serve a request, none of them is chosen for it: a partial
reclaim helps nobody.

Choice among the GPUs that fit (`victim_order`): longest idle first, then least work at
risk (fewest processes, no recent heartbeat), then those whose owner never asked to keep
them. Each choice carries its reason in words for the audit and the notice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from actuator.demand.model import Demand, Request
from exporter.units import format_duration


@dataclass(frozen=True)
class Candidate:
    """An idle process whose owner was warned, under `reclaim_when: demand` (or one already
    being reclaimed for a request: `serving` names it)."""

    case: int
    node: str
    gpu: str  # the GPU's UUID
    memory_bytes: int
    idle_since: float  # unix seconds
    processes: int = 1
    heartbeat_recent: bool = False
    kept_before: bool = False  # its owner has kept it before
    serving: str = ""  # the request (Request.ref) it is already being reclaimed for
    signalled: bool = False  # in flight: not a choice any more, only capacity


class Verdict(StrEnum):
    CHOSEN = "chosen"
    NOT_NEEDED = "not_needed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Choice:
    verdict: Verdict
    reason: str
    request: Request | None = None


@dataclass(frozen=True)
class Gpu:
    """One GPU's candidates, and whether they are all it holds (None: unknown)."""

    node: str
    uuid: str
    members: tuple[Candidate, ...]
    exclusive: bool | None

    @property
    def memory_bytes(self) -> int:
        return sum(c.memory_bytes for c in self.members)

    @property
    def serving(self) -> str:
        return next((c.serving for c in self.members if c.serving), "")


def victim_order(gpu: Gpu) -> tuple[float, int, bool, bool, str]:
    """Sort key: longest idle first, then fewest processes at risk, no recent heartbeat,
    never kept by its owner; the UUID last, so equal GPUs always sort the same way."""
    return (
        min(c.idle_since for c in gpu.members),
        sum(c.processes for c in gpu.members),
        any(c.heartbeat_recent for c in gpu.members),
        any(c.kept_before for c in gpu.members),
        gpu.uuid,
    )


def _waiting_order(request: Request) -> tuple[bool, float, str]:
    """A restore asked back first (its owner's work is held in host memory), then oldest."""
    since = request.since if request.since is not None else float("inf")
    return (not request.first, since, request.ref)


def _serves(gpu: Gpu, request: Request) -> bool:
    if not request.may_run_on(gpu.node):
        return False
    if request.on_gpus and gpu.uuid not in request.on_gpus:
        return False
    if request.gpus:
        return gpu.exclusive is True
    return gpu.memory_bytes >= (request.memory_bytes or 0)


def _pick(request: Request, gpus: list[Gpu], free: dict[str, int]) -> tuple[str, list[Gpu]] | None:
    """The node and the GPUs on it that serve `request` (those already serving it first),
    beside the GPUs already free there; None when no node has enough."""
    best: tuple[str, list[Gpu]] | None = None
    nodes = {g.node for g in gpus} | {n for n, count in free.items() if count > 0}
    for node in sorted(n for n in nodes if request.may_run_on(n)):
        need = max(0, request.gpus - free.get(node, 0)) if request.gpus else 1
        fitting = [g for g in gpus if g.node == node and _serves(g, request)]
        if len(fitting) < need:
            continue
        fitting.sort(key=lambda g: (g.serving != request.ref, victim_order(g)))
        chosen = fitting[:need]
        if best is None or _cost(chosen, request) < _cost(best[1], request):
            best = (node, chosen)
    return best


def _cost(gpus: list[Gpu], request: Request) -> tuple[int, tuple[float, ...]]:
    """Fewest new reclaims first, then the longest idle."""
    new = sum(1 for g in gpus if g.serving != request.ref)
    return new, tuple(sorted(victim_order(g)[0] for g in gpus))


def plan(
    demand: Demand,
    candidates: Iterable[Candidate],
    exclusive: dict[tuple[str, str], bool | None],
    now: float,
) -> dict[int, Choice]:
    """A choice for every candidate that is not already signalled (by case id)."""
    candidates = list(candidates)
    open_ = [c for c in candidates if not c.signalled]
    if not demand.known:
        why = f"demand unknown ({demand.why_unknown()}): held, nothing is reclaimed"
        return {c.case: Choice(Verdict.UNKNOWN, why) for c in open_}
    by_gpu: dict[tuple[str, str], list[Candidate]] = {}
    for c in candidates:
        by_gpu.setdefault((c.node, c.gpu), []).append(c)
    gpus = [
        Gpu(node, uuid, tuple(members), exclusive.get((node, uuid)))
        for (node, uuid), members in sorted(by_gpu.items())
    ]
    left = list(gpus)
    free = dict(demand.free)  # whole GPUs already free, per node, not yet counted
    out: dict[int, Choice] = {}
    for request in sorted(demand.requests, key=_waiting_order):
        picked = _pick(request, left, free)
        if picked is None:
            continue
        node, chosen = picked
        if request.gpus:  # the free GPUs beside the chosen ones go to this request too
            free[node] = max(0, free.get(node, 0) - (request.gpus - len(chosen)))
        waited = f" waiting {format_duration(now - request.since)}" if request.since else ""
        for gpu in chosen:
            left.remove(gpu)
            idle = format_duration(max(0.0, now - victim_order(gpu)[0]))
            why = f"chosen for {request.who}{waited}; idle {idle}"
            for c in gpu.members:
                if not c.signalled:
                    out[c.case] = Choice(Verdict.CHOSEN, why, request)
    why = "no waiting request this GPU can serve" if demand.requests else "nobody is waiting"
    for c in open_:
        out.setdefault(c.case, Choice(Verdict.NOT_NEEDED, why))
    return out
