"""What a reconciler step reads before its turn: its node's answer (the node's batched
re-check while fresh, else its own) and its guard (actuator/guard_reader.py). Round trips,
all of them, so they are made while other nodes' steps hold the turn."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from actuator.fleet.directory import NodeDirectory
from actuator.guard_reader import GuardRead, GuardReader
from actuator.ladder import SIGNALLED_STATES
from actuator.models import Case, LiveState, Member
from actuator.node import Node, NodeUnreachable

# A re-check read in its node's batch stands in for the case's own this long; older (the
# node's earlier cases took their time), the case is re-checked alone.
BATCHED_FRESH_FOR = 2.0


@dataclass(frozen=True)
class Signalled:
    """What the node says of a signalled case: members still alive, and (once none is) the
    GPU's process list, or None when unknown."""

    alive: list[Member]
    listed: dict[int, int] | None


Observation = LiveState | Signalled


@dataclass(frozen=True)
class Batched:
    """A case's re-check from its node's one inspect-many call, and when it was asked."""

    live: LiveState
    asked_mono: float


@dataclass(frozen=True)
class Prepared:
    """A step's reads before its turn: the node, what it said, and the guard."""

    case: Case
    node: Node
    seen: Observation | NodeUnreachable
    read: GuardRead | None


class StepReads:
    def __init__(
        self, nodes: NodeDirectory, guards: GuardReader, mono: Callable[[], float]
    ) -> None:
        self.nodes, self.guards, self.mono = nodes, guards, mono

    def inspect_due(self, name: str, due: list[Case]) -> dict[int, Batched] | None:
        """The re-checks of a node's due cases, in one round trip (a fleet's agent answers
        them together). Not signalled ones only (theirs is another question); nothing for
        a lone case, and None for an unanswered call: each case then asks on its own."""
        node = self.nodes.get(name)
        asking = [c for c in due if c.state not in SIGNALLED_STATES]
        if node is None or len(asking) < 2:
            return {}
        asked = self.mono()
        try:
            lives = node.inspect_many([c.target for c in asking])
        except Exception:
            # Unanswered, or one case's re-check broke: each case asks alone, and only a
            # broken one fails its step.
            return None
        return {c.id: Batched(live, asked) for c, live in zip(asking, lives, strict=True)}

    def fresh(self, batched: Batched) -> bool:
        return self.mono() - batched.asked_mono <= BATCHED_FRESH_FOR

    def observe(self, case: Case, node: Node) -> Observation | NodeUnreachable:
        """What the node says now: the recorded members still alive (and, once none is, the
        GPU's process list) for a signalled case, else the live re-check."""
        try:
            if case.state in SIGNALLED_STATES:
                members = case.members or [Member(case.pid, case.start_ticks, case.uid)]
                alive = node.alive(members)
                return Signalled(alive, None if alive else node.gpu_processes(case.uuid))
            return node.inspect(case.target)
        except NodeUnreachable as exc:
            return exc

    def prepare(self, case: Case, batched: Batched | None) -> Prepared | None:
        """The node's answer (its batched re-check while fresh) and the guard; None when
        the node is not known."""
        node = self.nodes.get(case.node)
        if node is None:
            return None
        fresh = batched is not None and self.fresh(batched)
        seen = batched.live if batched is not None and fresh else self.observe(case, node)
        read = self.guards.read(case) if isinstance(seen, LiveState) else None  # not our turn yet
        return Prepared(case, node, seen, read)
