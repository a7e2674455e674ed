"""The service's composition root: builds the reconciler from its parts (intake, the rule
book, the executor, the demand planner, the node batches) and starts the components that
run beside it (the demand reader, the namespace policy watch). Nothing here decides."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from functools import partial

from actuator.audit import AuditLog
from actuator.clock import boottime
from actuator.config import ActuatorConfig
from actuator.decision_alerts import DecisionAlerts
from actuator.demand.planner import DemandPlanner
from actuator.demand.reader import DemandReader
from actuator.demand.waitlist import promised_gpus
from actuator.evidence.pictures import EvidencePictures
from actuator.executor import Executor
from actuator.fleet.directory import NodeDirectory
from actuator.intake import Intake
from actuator.intake_first import DeliveryClock
from actuator.keeplinks import KeepLinks
from actuator.node import Node
from actuator.node_batch import NodeBatches
from actuator.notifications.notify import Notifier
from actuator.reconciler import Reconciler, step_failed
from actuator.rulebook import RuleBook
from actuator.schedulers import Schedulers
from actuator.schedulers.kube_policies import start_watch
from actuator.startup import idle_thresholds
from actuator.store import Fence, Store
from exporter import procfs


def build_reconciler(
    config: ActuatorConfig,
    store: Store,
    audit: AuditLog,
    nodes: Mapping[str, Node] | NodeDirectory,
    notifier: Notifier,
    *,
    clock: Callable[[], float] = time.time,
    mono: Callable[[], float] = boottime,
    holder: str | None = None,
    links: KeepLinks | None = None,
    pictures: EvidencePictures | None = None,
    alerts: DecisionAlerts | None = None,
    schedulers: Schedulers | None = None,
    demand: DemandReader | None = None,
    deliveries: DeliveryClock | None = None,
) -> Reconciler:
    directory = nodes if isinstance(nodes, NodeDirectory) else NodeDirectory(nodes)
    found = schedulers or Schedulers()
    holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    ttl = config.reconciler.lease_ttl

    def fence() -> Fence:
        return Fence(holder, mono(), ttl)

    failed = partial(step_failed, store, audit)
    thresholds = idle_thresholds(config)
    executor = Executor(
        audit=audit,
        notifier=notifier,
        gate=config.notice,
        clock=clock,
        mono=mono,
        alerts=alerts,
        links=links,
        pictures=pictures,
        thresholds=(
            ("max_sm_util", thresholds.max_sm_util),
            ("log_quiet_for", config.idle.log_quiet_for),
        ),
        promised=partial(promised_gpus, store, clock),
    )
    planner = DemandPlanner(
        demand,
        config.demand,
        store=store,
        audit=audit,
        node=directory.get,
        clock=clock,
        mono=mono,
        alerts=alerts,
    )
    schedulers_found = list(found.schedulers)
    return Reconciler(
        config,
        store,
        audit,
        directory,
        intake=Intake(
            config,
            store,
            audit,
            directory,
            clock=clock,
            mono=mono,
            pid_max=procfs.pid_max(),
            fence=fence,
            step_failed=failed,
        ),
        rules=RuleBook(
            config,
            store,
            directory,
            schedulers_found,
            found.namespaces,
            thresholds,
            clock=clock,
        ),
        planner=planner,
        batches=NodeBatches(store, audit, executor, planner, fence=fence, step_failed=failed),
        schedulers=schedulers_found,
        holder=holder,
        clock=clock,
        mono=mono,
        alerts=alerts,
        deliveries=deliveries,
    )


def start_components(
    config: ActuatorConfig,
    schedulers: Schedulers,
    demand: DemandReader | None,
    stop: threading.Event,
) -> None:
    """What runs beside the reconciler, each on its own thread until `stop`: the demand
    sources (read apart, so a slow one never stalls a pass) and the namespaces' policy."""
    if demand is not None:
        demand.start(stop)
    if schedulers.namespaces is not None and schedulers.kube is not None:
        start_watch(
            schedulers.kube.api_client,
            schedulers.namespaces.objects,
            stop,
            cluster_mode=config.mode,
        )
