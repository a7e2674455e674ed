"""Run the actuator under gunicorn (programmatic), one reconciler thread per worker; the
build_* functions turn the configuration into the worker's parts (actuator/compose.py
assembles the reconciler from them)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gunicorn.app.base import BaseApplication

from actuator.app import create_app
from actuator.asgi import asgi_app
from actuator.audit import AuditLog
from actuator.compose import build_reconciler, start_components
from actuator.config import (
    ActuatorConfig,
    NotifierSettings,
)
from actuator.decision_alerts import DecisionAlerts
from actuator.demand import DemandSource
from actuator.demand.promql_queue import PromqlQueue
from actuator.demand.reader import DemandReader
from actuator.demand.slurm_queue import SlurmQueue
from actuator.demand.waitlist import WaitList, WaitListDemand
from actuator.evidence.links import PictureLinks
from actuator.evidence.pictures import EvidencePictures
from actuator.evidence.rules import EvaluatedThresholds, rules_api
from actuator.fleet.directory import NodeDirectory, build_agents
from actuator.heap import settle_heap
from actuator.intake_first import DeliveryClock
from actuator.keep_socket import KeepSocket
from actuator.keeplinks import KeepLinks, link_key
from actuator.node import LocalNode, local_node
from actuator.notifications.channels import (
    Channel,
    DingTalkChannel,
    EmailChannel,
    FeishuChannel,
    SlackChannel,
    WeComChannel,
)
from actuator.notifications.messages import Price, Renderer
from actuator.notifications.notify import Notifier, NullNotifier, OwnerNotifier, WebhookNotifier
from actuator.notifications.owners import OwnerDirectory
from actuator.operators import OidcVerifier, Operators
from actuator.runtime import Runtime
from actuator.schedulers import KubePods, Scheduler, Schedulers, SlurmJobs
from actuator.schedulers.slurm_cli import SlurmApi, SlurmCli
from actuator.startup import load_node_projects
from actuator.store import Store, StoreUnavailable, open_store
from exporter import ownprocs
from exporter.logs import gunicorn_logconfig

if TYPE_CHECKING:
    from actuator.notifications.ldap_owners import LdapOwners

log = logging.getLogger(__name__)


def _secret(path: str | None) -> str | None:
    return Path(path).read_text(encoding="utf-8").strip() if path else None


def build_channels(settings: NotifierSettings) -> dict[str, Channel]:
    channels: dict[str, Channel] = {}
    if settings.email:
        e = settings.email
        channels["email"] = EmailChannel(
            e.host,
            e.port,
            e.sender,
            security=e.security,
            username=e.username,
            password=_secret(e.password_file),
            ca_file=e.ca_file,
            timeout=e.timeout,
        )
    if settings.wecom:
        channels["wecom"] = WeComChannel(settings.wecom.url, timeout=settings.wecom.timeout)
    if settings.dingtalk:
        d = settings.dingtalk
        channels["dingtalk"] = DingTalkChannel(
            d.url, secret=_secret(d.secret_file), timeout=d.timeout
        )
    if settings.feishu:
        f = settings.feishu
        channels["feishu"] = FeishuChannel(f.url, secret=_secret(f.secret_file), timeout=f.timeout)
    if settings.slack:
        channels["slack"] = SlackChannel(settings.slack.url, timeout=settings.slack.timeout)
    return channels


def build_ldap(settings: NotifierSettings) -> LdapOwners | None:
    if settings.ldap is None:
        return None
    from actuator.notifications.ldap_owners import LdapOwners

    s = settings.ldap
    return LdapOwners(
        s.url,
        s.base,
        user_filter=s.filter,
        bind_dn=s.bind_dn,
        password=_secret(s.password_file),
        attributes=s.attributes,
        timezone=s.timezone,
        cache_ttl=s.cache_ttl,
        timeout=s.timeout,
    )


def build_decision_alerts(config: ActuatorConfig) -> DecisionAlerts | None:
    am = config.alertmanager
    if am is None:
        return None
    return DecisionAlerts(
        am.urls,
        external_url=am.external_url,
        runbook_url=am.runbook_url,
        timeout=am.timeout,
        clock=time.time,
    )


def build_operators(config: ActuatorConfig) -> Operators | None:
    if config.operators is None:
        return None
    settings, oidc, ldap = config.operators, None, None
    roles: dict[str, list[str]] = {str(k): v for k, v in settings.roles.items()}
    if settings.oidc is not None:
        o = settings.oidc
        oidc = OidcVerifier(
            o.issuer,
            o.audience,
            o.jwks_url,
            groups_claim=o.groups_claim,
            roles=roles,
            leeway=o.leeway,
            timeout=o.timeout,
        )
    if settings.ldap is not None:
        from actuator.ldap_operators import LdapBindVerifier

        b = settings.ldap
        ldap = LdapBindVerifier(
            b.url,
            b.user_dn,
            group_base=b.group_base,
            group_filter=b.group_filter,
            roles=roles,
            timeout=b.timeout,
            cache_ttl=b.cache_ttl,
        )
    return Operators(oidc, ldap)


def build_links(config: ActuatorConfig, token: str) -> KeepLinks | None:
    """Keep links when the actuator has a public URL; the key is derived from the token, so
    every worker signs and checks alike."""
    settings = config.notifier
    if not settings.public_url:
        return None
    return KeepLinks(link_key(token), settings.public_url, ttl=settings.keep_link_ttl)


def build_picture_links(config: ActuatorConfig, token: str) -> PictureLinks | None:
    """Links to evidence pictures (chat, the keep page): with a public URL and pictures on;
    they expire with the evidence (the store's retention)."""
    settings = config.notifier
    if not settings.public_url or settings.evidence is None:
        return None
    return PictureLinks(link_key(token), settings.public_url, ttl=config.storage.retention)


def build_pictures(
    config: ActuatorConfig, store: Store, links: PictureLinks | None
) -> EvidencePictures | None:
    settings = config.notifier.evidence
    if settings is None:
        return None
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    # No retries: a notice waits for its picture at most `timeout`, all queries together.
    prom = PrometheusConnect(url=settings.prometheus, timeout=settings.timeout, retry=Retry(0))
    evaluated = EvaluatedThresholds(rules_api(settings.prometheus, settings.timeout))
    return EvidencePictures(
        prom,
        store,
        evaluated.current,  # the rules Prometheus runs, not idle.rules_file
        span=settings.span,
        budget=settings.timeout,
        links=links,
    )


def build_notifier(config: ActuatorConfig) -> Notifier:
    settings = config.notifier
    if settings.owner_channels():
        directory = (
            OwnerDirectory.load(settings.directory) if settings.directory else (OwnerDirectory())
        )
        return OwnerNotifier(
            directory,
            build_channels(settings),
            Renderer(
                settings.templates_dir,
                sre=settings.sre_contact,
                price=Price(settings.energy_price_per_kwh, settings.currency),
            ),
            ldap=build_ldap(settings),
        )
    hook = settings.webhook
    if hook is None:
        return NullNotifier()
    return WebhookNotifier(hook.url, timeout=hook.timeout, headers=hook.headers)


def open_audit(config: ActuatorConfig, store: Store | None = None) -> AuditLog:
    """The audit log; with the store, records it loses are counted there (/metrics)."""
    storage = config.storage
    return AuditLog(
        storage.audit_log,
        max_bytes=storage.audit_max_bytes,
        keep=storage.audit_keep,
        on_dropped=None if store is None else partial(store.count, "audit_records_dropped", ""),
    )


def build_schedulers(config: ActuatorConfig, nodes: NodeDirectory, store: Store) -> Schedulers:
    """Slurm (through its CLI or slurmrestd) and Kubernetes (through the API server), where
    configured: the clients are made here, once; the reconciler only consults them."""
    found: list[Scheduler] = []
    namespaces, kube = None, None
    if config.slurm is not None:
        s = config.slurm
        slurm: SlurmApi
        if s.rest is not None:
            from actuator.schedulers.slurm_rest import SlurmRest

            r = s.rest
            slurm = SlurmRest(
                r.url, r.user, r.token_file, api_version=r.api_version, timeout=s.timeout
            )
        else:
            env = {**os.environ, "SLURM_CONF": s.conf} if s.conf else None
            slurm = SlurmCli(s.scontrol, s.scancel, timeout=s.timeout, env=env)
        found.append(SlurmJobs(slurm, s, nodes, store))
    if config.kubernetes is not None:
        from actuator.schedulers.kube_api import KubeApi
        from actuator.schedulers.kube_policies import NamespacePolicies, PolicyObjects

        k = config.kubernetes
        kube = KubeApi.connect(k.kubeconfig, k.context, timeout=k.timeout)
        if k.policies:
            namespaces = NamespacePolicies(PolicyObjects(), k.action)
        found.append(KubePods(kube, k, namespaces))
    return Schedulers(tuple(found), namespaces, kube)


def build_waitlist(config: ActuatorConfig, nodes: NodeDirectory, store: Store) -> WaitList | None:
    """The node's wait list, where this actuator runs on the node and has its keep socket."""
    local = nodes.get(config.node.name)
    if not config.server.keep_socket or not isinstance(local, LocalNode):
        return None
    return WaitList(store, config.node.name, local.reading, time.time)


def build_demand(
    config: ActuatorConfig, schedulers: Schedulers, waitlist: WaitList | None
) -> DemandReader | None:
    """The demand sources the config names, on the schedulers' own clients."""
    d = config.demand
    if d is None:
        return None
    sources: list[DemandSource] = []
    if d.wait_list and waitlist is not None:
        sources.append(WaitListDemand(waitlist))
    if d.slurm:
        slurm = next((s.cli for s in schedulers.schedulers if isinstance(s, SlurmJobs)), None)
        if slurm is not None:  # the commands or slurmrestd, whichever `slurm` names
            sources.append(SlurmQueue(slurm))
    if d.kubernetes and schedulers.kube is not None:
        from actuator.demand.kube_pending import PendingPods

        sources.append(PendingPods(schedulers.kube))
    if d.pools:
        from prometheus_api_client import PrometheusConnect

        assert d.prometheus is not None
        from urllib3.util.retry import Retry

        # No retries, and a bound: a reading that fails is unknown demand, read again later.
        prom = PrometheusConnect(d.prometheus, retry=Retry(total=0), timeout=d.timeout)
        sources += [PromqlQueue(prom, p.pool, p.query, p.nodes) for p in d.pools]
    # Older than this, a reading is unknown: every source had its time (Slurm's and the
    # API server's own timeouts included).
    slowest = max([d.timeout, *(s.timeout for s in (config.slurm, config.kubernetes) if s)])
    max_age = 2 * d.interval + slowest
    return DemandReader(sources, interval=d.interval, clock=time.monotonic, max_age=max_age)


def build_nodes(config: ActuatorConfig) -> NodeDirectory:
    """This node (unless agents do all the work) and the fleet's agents."""
    local = None
    if config.agents is None or config.agents.local_node:
        projects = load_node_projects(config.node)
        local = local_node(config.node, config.protect, config.idle.sm_window, projects)
    return NodeDirectory(local, build_agents(config.agents) if config.agents else None)


class _Worker:
    """What one gunicorn worker owns: the app and its reconciler thread."""

    def __init__(
        self, config: ActuatorConfig, token: str, deliveries: DeliveryClock | None = None
    ) -> None:
        self.config = config
        store = open_store(config.storage.database)
        audit = open_audit(config, store)
        links = build_links(config, token)
        picture_links = build_picture_links(config, token)
        # Every wait is measured on the store's clock: this host's boot-time clock for
        # SQLite, the database server's for replicas sharing PostgreSQL.
        try:
            started = store.mono()
        except StoreUnavailable:
            started = float("-inf")  # the database is away: /-/ready says so meanwhile
        self.runtime = Runtime(
            config=config,
            store=store,
            audit=audit,
            token=token,
            links=links,
            pictures=picture_links,
            operators=build_operators(config),
            mono=store.mono,
            started_mono=started,
            deliveries=deliveries,
        )
        self.app = create_app(self.runtime)
        self.stop = threading.Event()
        nodes = build_nodes(config)
        schedulers = build_schedulers(config, nodes, store)
        self.waitlist = build_waitlist(config, nodes, store)
        self.schedulers = schedulers
        self.demand = build_demand(config, schedulers, self.waitlist)
        self.reconciler = build_reconciler(
            config,
            store,
            audit,
            nodes,
            build_notifier(config),
            links=links,
            pictures=build_pictures(config, store, picture_links),
            alerts=build_decision_alerts(config),
            mono=store.mono,
            schedulers=schedulers,
            demand=self.demand,
            deliveries=deliveries,
        )
        self.thread: threading.Thread | None = None
        self.own: Path | None = None

    def start(self) -> None:
        self.own = ownprocs.register("actuator-worker")  # sibling workers protect each other
        self.thread = threading.Thread(
            target=self.reconciler.run, args=(self.stop,), name="reconciler", daemon=True
        )
        self.thread.start()
        start_components(self.config, self.schedulers, self.demand, self.stop)
        server = self.config.server
        if server.keep_socket:
            keep = KeepSocket(
                self.runtime,
                server.keep_socket,
                sre_groups=server.keep_socket_groups,
                max_seconds=self.config.notifier.keep_max,
                node=self.config.node.name,
                waitlist=self.waitlist,
                rule_for=self.reconciler.rules.for_process,
            )
            threading.Thread(
                target=keep.run, args=(self.stop,), name="keep-socket", daemon=True
            ).start()

    def shutdown(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        ownprocs.unregister(self.own)


class ActuatorApplication(BaseApplication):
    def __init__(self, config: ActuatorConfig, token: str, listen: str) -> None:
        self.config = config
        self.token = token
        self.listen = listen
        self.worker: _Worker | None = None
        # Made here, in gunicorn's master, before it forks: every worker marks the same page.
        self.deliveries = DeliveryClock()
        super().__init__()

    def load_config(self) -> None:
        server = self.config.server
        settings: dict[str, Any] = {
            "bind": [self.listen],
            "workers": server.workers,
            "worker_class": server.worker_class,
            "worker_connections": server.max_connections,
            "timeout": int(max(server.timeout, 1)),
            "graceful_timeout": int(max(server.graceful_timeout, 1)),
            "keepalive": int(server.keepalive),
            "limit_request_line": 8190,
            "limit_request_fields": 100,
            "limit_request_field_size": 8190,
            "preload_app": False,
            "proc_name": "gpu-reclaimer-actuator",
            "accesslog": None,
            "errorlog": "-",
            "loglevel": logging.getLevelName(logging.getLogger().level).lower(),
            "logconfig_dict": gunicorn_logconfig(),  # one format: gunicorn's lines too
            "post_worker_init": self._post_worker_init,
            "worker_exit": self._worker_exit,
        }
        if server.tls is not None:  # gunicorn serves HTTPS itself
            settings["certfile"] = server.tls.certfile
            settings["keyfile"] = server.tls.keyfile
        if "control_socket_disable" in self.cfg.settings:
            settings["control_socket_disable"] = True  # gunicorn >= 24: no socket in $HOME
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Called in each worker after fork: every worker has its own connections.
        self.worker = _Worker(self.config, self.token, self.deliveries)
        if self.config.server.worker_class == "asgi":
            store = self.worker.runtime.store

            def refused(path: str) -> None:
                if path == "/api/v1/alerts":
                    with contextlib.suppress(StoreUnavailable):
                        store.count_request(413)

            return asgi_app(self.worker.app, self.config.server.max_body, refused)
        return self.worker.app

    def _post_worker_init(self, _worker: Any) -> None:
        settle_heap()  # built, not yet started: no later full collection walks it
        if self.worker is not None:
            self.worker.start()

    def _worker_exit(self, _server: Any, _worker: Any) -> None:
        if self.worker is not None:
            self.worker.shutdown()


def serve(config: ActuatorConfig, token: str, listen: str) -> int:
    try:
        open_store(config.storage.database).init()
    except StoreUnavailable as exc:
        log.error("%s", exc)
        return 1
    problem = open_audit(config).check_writable()
    if problem:
        log.error("%s: starting anyway, /-/ready reports 503 and nothing is signalled", problem)
    log.info(
        "actuator listening on %s, mode %s, %d workers", listen, config.mode, config.server.workers
    )
    own = ownprocs.register("actuator")
    try:
        ActuatorApplication(config, token, listen).run()
    finally:
        ownprocs.unregister(own)
    return 0
