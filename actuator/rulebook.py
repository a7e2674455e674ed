"""Which policy rule governs a case or a process, from what the node proves.

The rule is resolved from the node's facts (the process's user and groups, its namespace and
project, what each scheduler says of the workload); the alert's labels may only make it
safer (policy.Claims). The owner's repeat reclaims tighten it (repeat.py), counted once per
pass. One reader for the rule, shared by the reconciler's steps and the keep socket's
keeps asked in advance.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from actuator.config import ActuatorConfig
from actuator.decisions import STALLED_ALERTS
from actuator.fleet.directory import NodeDirectory
from actuator.models import Case, LiveState, Target
from actuator.policy import Claims, Effective, Facts, resolve
from actuator.repeat import with_repeat
from actuator.schedulers import Scheduler
from actuator.schedulers.kube_policies import NamespacePolicies
from actuator.store import Store
from exporter import procfs
from exporter.thresholds import Thresholds

log = logging.getLogger(__name__)


class RuleBook:
    def __init__(
        self,
        config: ActuatorConfig,
        store: Store,
        nodes: NodeDirectory,
        schedulers: Sequence[Scheduler],
        namespaces: NamespacePolicies | None,
        thresholds: Thresholds,
        *,
        clock: Callable[[], float],
    ) -> None:
        self.config, self.store, self.nodes = config, store, nodes
        self.schedulers, self.namespaces = schedulers, namespaces
        self.thresholds, self.clock = thresholds, clock
        self.boot_id = procfs.boot_id()
        self._repeat_counts: dict[str, int] = {}  # owner -> reclaims in the repeat window

    def new_pass(self) -> None:
        """The owners' reclaims are counted afresh once per pass."""
        self._repeat_counts = {}

    def for_case(self, case: Case, live: LiveState | None = None) -> Effective:
        """The rule from what the node sees; the alert's labels only make it safer."""
        return self._rule(case.node, case.user, case.labels, live)

    def recorded(self, case: Case) -> Effective:
        """The rule recorded when the case was signalled (without a live state to judge)."""
        return Effective.model_validate(case.effective) if case.effective else self.for_case(case)

    def for_process(self, pid: int) -> Effective | None:
        """The rule this node's facts select for a local process that has no case yet (a
        keep asked in advance is bounded by it); None when the process cannot be read."""
        name = self.config.node.name
        node = self.nodes.get(name)
        ticks = procfs.start_ticks(pid)
        if node is None or ticks is None:
            return None
        try:
            live = node.inspect(Target(name, pid, ticks, self.boot_id, "", 0.0))
        except Exception:
            log.warning("cannot read process %d for its rule", pid, exc_info=True)
            return None
        if not live.exists or live.start_ticks != ticks or live.user is None:
            return None
        return self._rule(name, None, {}, live)

    def thresholds_of(self, eff: Effective) -> dict[str, Any]:
        """What a decision was judged against, as its audit record states it."""
        idle = self.config.idle
        return {
            "max_sm_util": self.thresholds.max_sm_util,
            "max_cpu_cores": self.thresholds.max_cpu_cores,
            "max_memory_growth_bytes": self.thresholds.max_memory_growth_bytes,
            "cpu_window": idle.cpu_window,
            "log_quiet_for": idle.log_quiet_for,
            **eff.model_dump(),
        }

    def _rule(
        self, node: str, user: str | None, labels: dict[str, str], live: LiveState | None
    ) -> Effective:
        said: dict[str, str] = {}
        for scheduler in self.schedulers if live is not None else ():
            said.update(scheduler.facts(live))  # type: ignore[arg-type]
        facts = Facts(
            user=live.user if live and live.user else user,
            groups=live.groups if live else (),
            namespace=live.namespace if live else "",
            project=live.project if live else "",
            node=node if live and live.exists else "",
            listens_external=bool(live and live.listening_external),
            listen_ports=live.listen_ports if live else (),
            clients=live.network_clients if live else 0,
            client_ago=live.client_ago if live else None,
            watched_for=live.network_watched_for if live else None,
            busy=bool(
                live and live.sm_util is not None and live.sm_util > self.thresholds.max_sm_util
            ),
            **said,
        )
        claims = Claims(
            project=labels.get("project", ""),
            namespace=labels.get("namespace", ""),
            service=labels.get("class") == "service",
            stalled=labels.get("alertname", "") in STALLED_ALERTS
            or labels.get("class") == "stalled",
        )
        policy = self.namespaces.policy(self.config) if self.namespaces else self.config
        eff = resolve(policy, facts, claims)
        if self.config.repeat is None or not facts.user:
            return eff
        return with_repeat(eff, self._reclaims_of(facts.user), self.config.repeat)

    def _reclaims_of(self, user: str) -> int:
        """The owner's reclaims within the repeat window (counted once per pass)."""
        assert self.config.repeat is not None
        known = self._repeat_counts.get(user)
        if known is None:
            since = self.clock() - self.config.repeat.window
            known = self._repeat_counts[user] = self.store.reclaims_since(user, since)
        return known
