"""Demand for one reconciler pass: the reading, the plan, and the watch on reclaimed GPUs.

The reconciler asks `plan(cases)` once per pass (then hands each case its `Choice` in its
FleetState) and `watch()` after it: here are the side effects demand has of its own (the
demand gauges and outage records in the store and the audit, the questions to the nodes);
the decisions stay pure (actuator/demand/fit.py, actuator/demand/handoff.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from actuator.audit import AuditError, AuditLog
from actuator.audit_records import DemandSourceChanged, GpuTaken, HandedOff, NeedlessReclaim
from actuator.config import NEEDLESS_AFTER_S, DemandSettings
from actuator.decision_alerts import DecisionAlerts
from actuator.demand.candidates import candidates, on_demand, pids_on
from actuator.demand.fit import Choice, plan
from actuator.demand.handoff import HandOffWatch, Watched, judge, needs_proof, new_holders
from actuator.demand.model import Claimant, Demand
from actuator.demand.reader import DemandReader
from actuator.models import Case, Target
from actuator.node import Node, NodeUnreachable
from actuator.restore_place import restore_requests
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
        alerts: DecisionAlerts | None = None,
    ) -> None:
        self.reader, self.store, self.audit, self.node = reader, store, audit, node
        self.alerts = alerts
        self.clock, self.mono = clock, mono
        self.heartbeat_recent = settings.heartbeat_recent if settings else 0.0
        self.handoffs = HandOffWatch(
            window=settings.needless_after if settings else NEEDLESS_AFTER_S,
            every=settings.interval if settings else 10.0,
        )
        self._seen: Demand | None = None
        # (node, GPU UUID) -> (when asked, whether its processes are all candidates')
        self._exclusive: dict[tuple[str, str], tuple[float, bool | None]] = {}
        self._claimant_of: dict[str, Claimant | None] = {}  # Request.ref -> whose process

    # -- before the pass -----------------------------------------------------------------

    def plan(self, cases: list[Case]) -> dict[int, Choice]:
        """Who waits (the latest reading), and which warned idle cases serve them."""
        demand = self.reader.read() if self.reader is not None else None
        if demand is not None and demand is not self._seen and not demand.placeholder:
            self._record(demand)
        waiting = [c for c in cases if on_demand(c)]
        if not waiting:
            self._exclusive.clear()
            self._claimant_of.clear()
            return {}
        now = self.clock()
        restores = restore_requests(cases)  # first in line: the store's own, always known
        if demand is None and restores:
            demand = Demand(restores, read_at=now)
        elif demand is not None and restores:
            demand = replace(demand, requests=restores + demand.requests)
        demand = demand or NO_SOURCE
        found = candidates(waiting, now, self.heartbeat_recent)
        # Only what may be reclaimed now frees a GPU: a kept or not yet warned case beside
        # it stays, so its GPU is not whole (and a reclaim there would serve nobody).
        chosen_from = {c.case for c in found}
        reclaimable = [c for c in waiting if c.id in chosen_from]
        exclusive: dict[tuple[str, str], bool | None] = {}
        if demand.known and any(r.gpus for r in demand.requests):
            mono, ttl = self.mono(), self.handoffs.every
            for key in {(c.node, c.gpu) for c in found}:
                at, known = self._exclusive.get(key, (float("-inf"), None))
                if mono - at >= ttl:  # asked of the node once per demand reading
                    known = self._holds_only(reclaimable, *key)
                    self._exclusive[key] = (mono, known)
                exclusive[key] = known
            self._exclusive = {k: v for k, v in self._exclusive.items() if k in exclusive}
        choices = plan(demand, found, exclusive, now)
        self._remember_claimants(demand, waiting, choices)
        return choices

    def _remember_claimants(
        self, demand: Demand, cases: list[Case], choices: dict[int, Choice]
    ) -> None:
        """Whose process proves each chosen request's hand-off, kept while a case serves it:
        by the time its GPU is free the request may have left the queue (its job started)."""
        serving = {c.demand_for for c in cases if c.demand_for}
        serving |= {ch.request.ref for ch in choices.values() if ch.request is not None}
        known = {**self._claimant_of, **{r.ref: r.claimant for r in demand.requests}}
        self._claimant_of = {ref: who for ref, who in known.items() if ref in serving}

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
                record = DemandSourceChanged(source=name, up=now_up, error=demand.down.get(name))
                with contextlib.suppress(AuditError):
                    self.audit.write(record)
        waiting = {name: 0 for name in names}
        for request in demand.requests:
            waiting[request.source] = waiting.get(request.source, 0) + 1
        self.store.set_demand(up, waiting)

    # -- after the pass ------------------------------------------------------------------

    def reclaimed(self, case: Case, mono: float) -> None:
        """Watch the GPU a case freed: its next holder, or a needless reclaim. What else
        holds it now is never its next holder; the request it was freed for says whose
        process proves the hand-off."""
        freed = frozenset({case.pid, *(m.pid for m in case.members)})
        trigger: Literal["idle", "demand"] = "demand" if case.demand_for else "idle"
        listed = self._listed(case.node, case.uuid) or {}
        claimant = self._claimant_of.get(case.demand_for or "")
        watched = Watched(
            case.id,
            case.node,
            case.uuid,
            trigger,
            case.demand_for,
            mono,
            freed,
            claimant=claimant,
            who=case.demand_who or "",
        )
        # The request's own process may be there already (its job started the moment the
        # GPU was free): it is the hand-off, not a process that was there before.
        others = tuple(sorted(frozenset(listed) - freed))
        theirs = self._claimants(watched, others) if needs_proof(watched) else frozenset()
        self.handoffs.add(replace(watched, present=frozenset(others) - theirs))

    def _claimants(self, w: Watched, pids: tuple[int, ...]) -> frozenset[int]:
        """Which of `pids` on the GPU are the request's own processes (asked of the node;
        whatever cannot be told proves nothing)."""
        node, claimant = self.node(w.node), w.claimant
        if node is None or claimant is None or not pids:
            return frozenset()
        try:
            if claimant.slurm_job is not None:
                job = node.job_processes(claimant.slurm_job) or []
                return frozenset(pids) & {t.pid for t in job}
            proven = set()
            for pid in pids:
                seen = node.inspect(Target(w.node, pid, 0, "", w.gpu, 0.0))
                if not seen.exists or seen.start_ticks is None or seen.boot_id is None:
                    continue
                if claimant.uid is not None and seen.uid == claimant.uid:
                    proven.add(pid)
                elif claimant.pod is not None:
                    # The pod is told only for the very process (its start ticks and boot).
                    same = Target(w.node, pid, seen.start_ticks, seen.boot_id, w.gpu, 0.0)
                    full = node.inspect(same)
                    if full.exists and f"{full.namespace}/{full.pod}" == claimant.pod:
                        proven.add(pid)
            return frozenset(proven)
        except NodeUnreachable:
            return frozenset()

    def watch(self) -> None:
        """Reclaimed GPUs: their next holder (audited), the proven hand-off to the request
        they were freed for (audited, to chat), or a needless reclaim (counted)."""
        mono = self.mono()
        for w in self.handoffs.due(mono):
            listed = self._listed(w.node, w.gpu)
            new = new_holders(w, listed)
            proven = self._claimants(w, new) if needs_proof(w) else frozenset()
            outcome = judge(w, listed, mono, self.handoffs.window, proven)
            if outcome is None:
                continue
            self.handoffs.done(w.case)
            if outcome.kind == "unknown":
                continue
            if outcome.kind == "needless":
                self.store.count("needless_reclaims", w.trigger)
            why = None
            if outcome.kind == "needless" and outcome.holders:
                why = (
                    f"taken by processes that are not {w.claimant.describe()}'s"
                    if w.claimant is not None
                    else "taken by others"
                )
            kind = NeedlessReclaim if outcome.kind == "needless" else GpuTaken
            record = kind(
                case=w.case,
                node=w.node,
                uuid=w.gpu,
                trigger=w.trigger,
                request=w.request,
                holders=list(outcome.holders),
                seconds=round(outcome.seconds, 3),
                why=why,
            )
            with contextlib.suppress(AuditError):
                self.audit.write(record)
            if outcome.kind == "handed_off":
                self._handed_off(w, outcome.holders, outcome.seconds)

    def _handed_off(self, w: Watched, holders: tuple[int, ...], seconds: float) -> None:
        with contextlib.suppress(AuditError):
            self.audit.write(
                HandedOff(
                    case=w.case,
                    request=w.request,
                    who=w.who,
                    holders=list(holders),
                    seconds=round(seconds, 3),
                )
            )
        case = self.store.get_case(w.case) if self.alerts is not None else None
        if case is not None and self.alerts is not None:
            self.alerts.handed_off(case)
