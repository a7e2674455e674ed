"""A step's guard, read before the step waits for its turn, and again only when it must.

The reconciler decides one step at a time (its `_acting` lock) so that the rate limits
count every SIGTERM decided before: the one fact the steps change for each other. The
rest of the guard (firing episodes, the breaker, an owner's keep) is changed by other
workers and processes whenever they like, with or without the lock. So a step reads its
guard while it waits for its turn; at its turn, the guard is read again only when a step
committed a SIGTERM (the limited rung) after the read began. A read made earlier counts
SIGTERMs over a window that starts earlier, never fewer, and sees a keep no later
expired: stale only towards holding back. On PostgreSQL the read is a round trip, which
the steps of other nodes no longer wait behind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from actuator.decisions import FleetState
from actuator.demand.fit import Choice
from actuator.models import Case, State
from actuator.store import GuardFacts, KeepKey, Store

NODE_WINDOW = 3600.0  # seconds: the per-node limit counts SIGTERMs in the last hour
FLEET_WINDOW = 60.0  # seconds: the fleet-wide limit counts them in the last minute


@dataclass(frozen=True)
class GuardRead:
    facts: GuardFacts
    limited_made: int  # the limited-rung commits this worker had made when the read began


class GuardReader:
    def __init__(
        self,
        store: Store,
        limited_made: Callable[[], int],
        clock: Callable[[], float],
        mono: Callable[[], float],
    ) -> None:
        self.store, self._limited_made, self.clock, self.mono = store, limited_made, clock, mono

    def read(self, case: Case) -> GuardRead:
        made = self._limited_made()  # first: a commit during the read counts as after it
        mono = self.mono()
        # A keep counts only for a pending case: one its owner asked before the case opened.
        keep = KeepKey(case.node, case.pid, case.start_ticks, case.boot_id)
        facts = self.store.guard_facts(
            case.id,
            case.node,
            node_since=mono - NODE_WINDOW,
            fleet_since=mono - FLEET_WINDOW,
            clock=self.store.clock_id,
            keep=keep if case.state == State.PENDING else None,
            now=self.clock(),
        )
        return GuardRead(facts, made)

    def at_turn(self, case: Case, read: GuardRead | None, demand: Choice | None) -> FleetState:
        """The guard for a step at its turn: `read` as read before, or read again when a
        SIGTERM was committed since (or nothing was read)."""
        if read is None or read.limited_made != self._limited_made():
            read = self.read(case)
        facts = read.facts
        return FleetState(
            unresolved=facts.unresolved,
            breaker_open=facts.breaker_open,
            terminations_node_hour=facts.terminations_node,
            terminations_minute=facts.terminations_fleet,
            kept_until=facts.kept_until,
            demand=demand,
        )
