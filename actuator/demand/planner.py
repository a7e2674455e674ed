"""Demand for one reconciler pass: the reading, the plan, and the watch on reclaimed GPUs.

The reconciler asks `plan(cases)` once per pass (then hands each case its `Choice` in its
FleetState) and `watch()` after it: here are the side effects demand has of its own (the
demand gauges and outage records in the store and the audit, the questions to the nodes);
the decisions stay pure (actuator/demand/fit.py, actuator/demand/handoff.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Literal

from actuator.audit import AuditError, AuditLog, Event
from actuator.config import NEEDLESS_AFTER_S, DemandSettings
from actuator.demand.candidates import candidates, on_demand, pids_on
from actuator.demand.fit import Choice, plan
from actuator.demand.handoff import HandOffWatch, Watched, judge
from actuator.demand.model import Demand
from actuator.demand.reader import DemandReader
from actuator.models import Case
from actuator.node import Node, NodeUnreachable
from actuator.store import Store

NO_SOURCE = Demand(down={"demand": "no demand source is configured"})


class DemandPlanner:
    def __init__(
        self,
        reader: DemandReader | None,
        settings: DemandSettings | None,
        *,
        store: Store,
        audit: AuditLog,
        node: Callable[[str], Node | None],
        clock: Callable[[], float],
        mono: Callable[[], float],
    ) -> None:
        self.reader, self.store, self.audit, self.node = reader, store, audit, node
        self.clock, self.mono = clock, mono
        self.heartbeat_recent = settings.heartbeat_recent if settings else 0.0
        self.handoffs = HandOffWatch(
            window=settings.needless_after if settings else NEEDLESS_AFTER_S,
            every=settings.interval if settings else 10.0,
        )
        self._seen: Demand | None = None
        # (node, GPU UUID) -> (when asked, whether its processes are all candidates')
        self._exclusive: dict[tuple[str, str], tuple[float, bool | None]] = {}

    # -- before the pass -----------------------------------------------------------------

    def plan(self, cases: list[Case]) -> dict[int, Choice]:
        """Who waits (the latest reading), and which warned idle cases serve them."""
        demand = self.reader.read() if self.reader is not None else None
        if demand is not None and demand is not self._seen and not demand.placeholder:
            self._record(demand)
        waiting = [c for c in cases if on_demand(c)]
        if not waiting:
            self._exclusive.clear()
            return {}
        demand = demand or NO_SOURCE
        now = self.clock()
        found = candidates(waiting, now, self.heartbeat_recent)
        exclusive: dict[tuple[str, str], bool | None] = {}
        if demand.known and any(r.gpus for r in demand.requests):
            mono, ttl = self.mono(), self.handoffs.every
            for key in {(c.node, c.gpu) for c in found}:
                at, known = self._exclusive.get(key, (float("-inf"), None))
                if mono - at >= ttl:  # asked of the node once per demand reading
                    known = self._holds_only(waiting, *key)
                    self._exclusive[key] = (mono, known)
                exclusive[key] = known
            self._exclusive = {k: v for k, v in self._exclusive.items() if k in exclusive}
        return plan(demand, found, exclusive, now)

    def _holds_only(self, cases: list[Case], node_name: str, gpu: str) -> bool | None:
        """Whether the GPU holds nothing but these cases' processes (None: unknown)."""
        listed = self._listed(node_name, gpu)
        return None if listed is None else set(listed) <= pids_on(cases, node_name, gpu)

    def _listed(self, node_name: str, gpu: str) -> dict[int, int] | None:
        node = self.node(node_name)
        if node is None:
            return None
        try:
            return node.gpu_processes(gpu)
        except NodeUnreachable:
            return None

    def _record(self, demand: Demand) -> None:
        """Gauges for /metrics, and an audit record when a source goes down or comes back
        (compared with what the store last recorded: a new leader does not repeat it)."""
        self._seen = demand
        names = self.reader.names if self.reader is not None else ()
        before = self.store.demand_up()
        up = {name: name not in demand.down for name in names}
        for name, now_up in up.items():
            if before.get(name, True) != now_up:
                record = {
                    "event": Event.DEMAND_SOURCE,
                    "source": name,
                    "up": now_up,
                    "error": demand.down.get(name),
                }
                with contextlib.suppress(AuditError):
                    self.audit.write(record)
        waiting = {name: 0 for name in names}
        for request in demand.requests:
            waiting[request.source] = waiting.get(request.source, 0) + 1
        self.store.set_demand(up, waiting)

    # -- after the pass ------------------------------------------------------------------

    def reclaimed(self, case: Case, mono: float) -> None:
        """Watch the GPU a case freed: its next holder, or a needless reclaim."""
        freed = frozenset({case.pid, *(m.pid for m in case.members)})
        trigger: Literal["idle", "demand"] = "demand" if case.demand_for else "idle"
        watched = Watched(case.id, case.node, case.uuid, trigger, case.demand_for, mono, freed)
        self.handoffs.add(watched)

    def watch(self) -> None:
        """Reclaimed GPUs: their next holder (audited), or a needless reclaim (counted)."""
        mono = self.mono()
        for w in self.handoffs.due(mono):
            outcome = judge(w, self._listed(w.node, w.gpu), mono, self.handoffs.window)
            if outcome is None:
                continue
            self.handoffs.done(w.case)
            if outcome.kind == "unknown":
                continue
            if outcome.kind == "needless":
                self.store.count("needless_reclaims", w.trigger)
            event = Event.GPU_TAKEN if outcome.kind == "taken" else Event.NEEDLESS_RECLAIM
            record = {
                "event": event,
                "case": w.case,
                "node": w.node,
                "uuid": w.gpu,
                "trigger": w.trigger,
                "request": w.request,
                "holders": list(outcome.holders),
                "seconds": round(outcome.seconds, 3),
            }
            with contextlib.suppress(AuditError):
                self.audit.write(record)
