"""The actuator's config file: the policy plus where it listens, stores and notifies."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from actuator.policy import Duration, Mode, Policy, Port, ReclaimWhen, Size, Strict
from exporter import config_errors

DEFAULT_PORT = 9836
NEEDLESS_AFTER_S = 3600.0  # a reclaimed GPU nobody took within this long: needless
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes, with its terminating NUL
M = TypeVar("M", bound=Strict)


def _url(*schemes: str, example: str) -> AfterValidator:
    """A URL that can work: one of `schemes`, a host, no blanks (checked when the config
    loads, `--check-config` too, so a notice never fails on a URL that never could)."""

    def check(value: str) -> str:
        if value == "":
            return value  # optional settings say "none" this way; required ones set min_length
        parts = urlsplit(value)
        if parts.scheme not in schemes or not parts.hostname or any(c.isspace() for c in value):
            forms = " or ".join(f"{s}://" for s in schemes)
            raise ValueError(f"expected a {forms} URL with a host, e.g. {example}, not {value!r}")
        return value

    return AfterValidator(check)


HttpUrl = Annotated[str, _url("http", "https", example="https://host.example/path")]
LdapUrl = Annotated[str, _url("ldap", "ldaps", example="ldaps://ldap.example:636")]


class ServerTls(Strict):
    certfile: str = Field(min_length=1, description="PEM certificate (chain)")
    keyfile: str = Field(min_length=1, description="PEM private key")


class Server(Strict):
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    workers: int = Field(2, ge=1, le=64)
    worker_class: Literal["asgi", "sync"] = Field(
        "asgi",
        description="asgi: an event loop reads requests, so slow clients cannot stall the "
        "webhook (docs/actuator.md); sync: one request per worker at a time",
    )
    max_connections: int = Field(
        1000, ge=10, le=100_000, description="open connections per worker (asgi)"
    )
    timeout: Duration = Field(30.0, gt=0, description="gunicorn worker timeout")
    graceful_timeout: Duration = Field(10.0, gt=0)
    keepalive: Duration = Field(5.0, ge=0)
    max_body: Size = Field(2**20, gt=0, description="larger request bodies get 413")
    token_file: str | None = None
    tls: ServerTls | None = Field(None, description="HTTPS on the actuator itself")
    keep_socket: str | None = Field(
        None,
        description="unix socket for `gpu-reclaimer keep` on the node (SO_PEERCRED), "
        "e.g. /run/gpu-reclaimer/keep.sock",
    )
    keep_socket_groups: tuple[str, ...] = Field(
        (), description="unix groups whose members may keep anyone's process"
    )

    @field_validator("keep_socket")
    @classmethod
    def _short_enough(cls, value: str | None) -> str | None:
        if value is not None and len(os.fsencode(value)) > MAX_SOCKET_PATH:
            raise ValueError(
                f"a unix socket's path is at most {MAX_SOCKET_PATH} bytes; "
                f"this one has {len(os.fsencode(value))}"
            )
        return value


class Storage(Strict):
    database: str = Field(
        "/var/lib/gpu-reclaimer/actuator.db",
        description="a SQLite file (one actuator), or a postgresql:// URL that replicas share "
        "(password from ~/.pgpass or PGPASSFILE, not the URL)",
    )
    audit_log: str = "/var/log/gpu-reclaimer/audit.jsonl"
    audit_max_bytes: Size = Field(
        100 * 2**20, ge=2**16, description="rotate the audit log past this"
    )
    audit_keep: int = Field(5, ge=1, le=100, description="rotated audit files kept")
    retention: Duration = Field(
        30 * 86400.0, ge=3600, description="ended cases and their episodes are pruned after this"
    )


class NodeConfig(Strict):
    """The node this actuator acts on, and where its evidence lives: the same settings the
    node's exporter has, so the re-check reads what the rules saw."""

    name: str = Field(default_factory=socket.gethostname, min_length=1)
    sim_dir: str | None = None
    heartbeat_dir: str | None = "/run/gpu-reclaimer/heartbeats"
    log_globs: tuple[str, ...] = ()
    projects_file: str | None = Field(None, description="the exporter's project mapping")
    nvml_timeout: Duration = Field(2.0, gt=0, le=2.0, description="a re-check waits no longer")
    pod_resources_socket: str | None = Field(
        None,
        description="the kubelet's pod-resources socket: names the pod of a process "
        "(/var/lib/kubelet/pod-resources/kubelet.sock on a Kubernetes node)",
    )
    network: bool = Field(
        True, description="read the trees' TCP sockets (listeners, data beyond keep-alive)"
    )
    network_keepalive_bytes: int = Field(
        4096, ge=0, description="bytes per minute that are keep-alive, as the exporter's"
    )
    network_window: Duration = Field(
        60.0,
        gt=0,
        le=3600,
        description="the window those bytes are counted over, as the exporter's: a tree the "
        "node has watched for less is unknown, never quiet (no notice goes out on it)",
    )
    rendezvous_ports: tuple[Port, ...] = Field(
        (29400, 29500),
        description="ports a job's own ranks meet on, never a service, as the exporter's "
        "(ports bound to 0 and the process's MASTER_PORT always are)",
    )
    presence: bool = Field(
        True,
        description="read the owner's presence (login sessions, notebook connections) at the "
        "re-checks, as the exporter's; judged only where a rule sets presence_grace",
    )
    utmp_file: str = Field("/var/run/utmp", description="the login records, as the exporter's")


class WebhookSettings(Strict):
    url: HttpUrl = Field(min_length=1)
    timeout: Duration = Field(5.0, gt=0, le=60)
    headers: dict[str, str] = {}


class EmailSettings(Strict):
    host: str = Field(min_length=1)
    port: int = Field(587, ge=1, le=65535)
    sender: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", description="the From: address")
    security: Literal["starttls", "tls", "none"] = Field(
        "starttls", description="starttls (port 587), tls (implicit, port 465), none"
    )
    username: str | None = None
    password_file: str | None = Field(None, description="a file holding the SMTP password")
    ca_file: str | None = Field(None, description="CA bundle for the server's certificate")
    timeout: Duration = Field(10.0, gt=0, le=60)


class RobotSettings(Strict):
    url: HttpUrl = Field(
        min_length=1, description="the robot's webhook URL, as the service shows it"
    )
    secret_file: str | None = Field(
        None, description="DingTalk/Feishu signing secret (the robot's signature option)"
    )
    timeout: Duration = Field(5.0, gt=0, le=60)


class LdapSettings(Strict):
    url: LdapUrl = Field(min_length=1, description="ldap://host:389 or ldaps://host:636")
    base: str = Field(
        min_length=1, description="where people are, e.g. ou=people,dc=example,dc=com"
    )
    filter: str = Field("(uid={user})", description="{user}: the process's user name, escaped")
    bind_dn: str | None = None
    password_file: str | None = None
    attributes: dict[str, str] = Field(
        {},
        description="contact field -> attribute, over the defaults (name: displayName, "
        "email: mail, language: preferredLanguage); e.g. wecom: employeeNumber",
    )
    timezone: str = Field("UTC", description="for people whose entry has no time zone")
    cache_ttl: Duration = Field(600.0, ge=0)
    timeout: Duration = Field(5.0, gt=0, le=60)


class EvidenceSettings(Strict):
    """The picture each notice carries (actuator/evidence/): the process over the last
    hours, drawn from the Prometheus the idle rules run in."""

    prometheus: HttpUrl = Field(
        min_length=1,
        description="the Prometheus the idle rules run in (a base URL)",
    )
    span: Duration = Field(
        3 * 3600.0, ge=600, le=7 * 86400, description="how far back a picture reaches"
    )
    timeout: Duration = Field(
        5.0,
        gt=0,
        le=60,
        description="for the whole picture, all its queries: a slower Prometheus means none",
    )


class NotifierSettings(Strict):
    webhook: WebhookSettings | None = None
    ldap: LdapSettings | None = Field(None, description="people from LDAP (over the file's)")
    directory: str | None = Field(
        None, description="owner directory (YAML, actuator/notifications/owners.py)"
    )
    templates_dir: str | None = Field(None, description="site templates, searched first")
    sre_contact: str = Field("", description="how messages name the SRE team, e.g. #gpu-help")
    public_url: HttpUrl | None = Field(
        None,
        description="the actuator as owners reach it (https://reclaimer.example.com): notices "
        "then carry a signed 'keep my job' link to its /keep page",
    )
    keep_link_ttl: Duration = Field(86400.0, ge=60, le=7 * 86400, description="links expire")
    keep_max: Duration = Field(
        86400.0, ge=3600, le=7 * 86400, description="the longest an owner keeps a job by link"
    )
    energy_price_per_kwh: float | None = Field(
        None, ge=0, description="notices say what the idle time cost at this price per kWh"
    )
    currency: str = Field("", max_length=8, description="printed before the cost, e.g. ¥ or $")
    evidence: EvidenceSettings | None = Field(
        None, description="a picture of the process's last hours with each notice"
    )
    email: EmailSettings | None = None
    wecom: RobotSettings | None = None
    dingtalk: RobotSettings | None = None
    feishu: RobotSettings | None = None
    slack: RobotSettings | None = None

    def owner_channels(self) -> list[str]:
        return [n for n in ("email", "wecom", "dingtalk", "feishu", "slack") if getattr(self, n)]

    @model_validator(mode="after")
    def _directory_and_channels(self) -> NotifierSettings:
        if self.owner_channels() and not (self.directory or self.ldap):
            raise ValueError(
                "owner channels need notifier.directory (or notifier.ldap): who is reached where"
            )
        if (self.directory or self.ldap) and not self.owner_channels():
            raise ValueError(
                "notifier.directory needs at least one channel (email, wecom, "
                "dingtalk, feishu, slack)"
            )
        return self

    @property
    def configured(self) -> bool:
        return self.webhook is not None or bool(self.owner_channels())


class OidcSettings(Strict):
    issuer: str = Field(min_length=1, description="the tokens' `iss`, exactly")
    audience: str = Field(min_length=1, description="the tokens' `aud` (this actuator's id)")
    jwks_url: HttpUrl = Field(min_length=1, description="the issuer's JWKS (keys) URL")
    groups_claim: str = "groups"
    leeway: Duration = Field(30.0, ge=0, le=300, description="clock skew allowed on exp/iat")
    timeout: Duration = Field(5.0, gt=0, le=30)


class LdapBindSettings(Strict):
    """People sign in with their directory password (HTTP Basic; serve HTTPS: server.tls)."""

    url: LdapUrl = Field(min_length=1, description="ldap:// or ldaps://")
    user_dn: str = Field(min_length=1, description="e.g. uid={user},ou=people,dc=example,dc=com")
    group_base: str = Field(min_length=1, description="where groups are searched")
    group_filter: str = "(&(objectClass=groupOfNames)(member={dn}))"
    timeout: Duration = Field(5.0, gt=0, le=30)
    cache_ttl: Duration = Field(60.0, ge=0, le=3600)


class OperatorSettings(Strict):
    """People at the API: with this set, the shared token is Alertmanager's only."""

    oidc: OidcSettings | None = None
    ldap: LdapBindSettings | None = None
    roles: dict[Literal["sre", "admin"], list[str]] = Field(
        default_factory=dict, description="role -> the groups that have it"
    )

    @model_validator(mode="after")
    def _a_way_in(self) -> OperatorSettings:
        if self.oidc is None and self.ldap is None:
            raise ValueError("operators: configure oidc, ldap, or both")
        if self.ldap is not None and "{user}" not in self.ldap.user_dn:
            raise ValueError("operators.ldap.user_dn must contain {user}")
        return self


class AlertmanagerSettings(Strict):
    """Where the actuator posts its own decision alerts (actuator/decision_alerts.py)."""

    urls: list[HttpUrl] = Field(
        min_length=1, description="Alertmanager base URLs (all of an HA set)"
    )
    external_url: HttpUrl = Field("", description="the actuator's URL, for case links in alerts")
    runbook_url: HttpUrl = Field("", description="an absolute runbook link for every alert")
    timeout: Duration = Field(5.0, gt=0, le=30)


class AgentClientTls(Strict):
    ca_file: str = Field(min_length=1, description="CA that signed the agents' certificates")
    certfile: str = Field(min_length=1, description="the actuator's client certificate")
    keyfile: str = Field(min_length=1, description="its private key")


class PrometheusAgentDiscovery(Strict):
    """Agents beside the exporters Prometheus scrapes: node -> https://HOST:agent_port."""

    url: HttpUrl = Field(min_length=1, description="Prometheus that scrapes the exporters")
    job: str = Field("gpu-exporter", pattern=r"^[A-Za-z0-9_.:-]{1,100}$")
    agent_port: int = Field(9837, ge=1, le=65535)
    refresh: Duration = Field(30.0, gt=0)


class AgentsSettings(Strict):
    """The fleet: node agents this actuator drives over mutual TLS (docs/deployment.md)."""

    tls: AgentClientTls
    static: dict[str, str] = Field(default_factory=dict, description="node -> agent URL")
    url_template: str | None = Field(None, description="e.g. https://{node}:9837")
    prometheus: PrometheusAgentDiscovery | None = None
    local_node: bool = Field(False, description="also act on this node in-process (node:)")
    timeout: Duration = Field(5.0, gt=0, le=60, description="per agent call")
    unreachable_wait: Duration = Field(
        30.0, ge=0, description="a case whose agent does not answer is deferred after this"
    )
    unreachable_give_up: Duration = Field(3600.0, gt=0, description="... and refused after this")

    @model_validator(mode="after")
    def _https_only(self) -> AgentsSettings:
        urls = dict(self.static)
        if self.url_template is not None:
            if "{node}" not in self.url_template:
                raise ValueError("url_template must contain {node}")
            urls["url_template"] = self.url_template
        for name, url in urls.items():
            if not url.startswith("https://"):
                raise ValueError(f"{name}: agents are reached over HTTPS only, not {url!r}")
        if not (self.static or self.url_template or self.prometheus):
            raise ValueError("name the agents: static, url_template or prometheus")
        return self


class SlurmRestSettings(Strict):
    """slurmrestd instead of the commands: JWT auth (`scontrol token` writes the token)."""

    url: HttpUrl = Field(min_length=1, description="e.g. http://slurmctl:6820")
    user: str = Field(min_length=1, description="the Slurm user the token is for (an operator)")
    token_file: str = Field(min_length=1, description="read on every request: rotate freely")
    api_version: str = Field("v0.0.38", pattern=r"^v0\.0\.[0-9]+$")


class SlurmSettings(Strict):
    """Slurm jobs are reclaimed whole, through the scheduler (docs/slurm.md)."""

    action: Literal["cancel", "signal"] = Field(
        "cancel",
        description="cancel: scancel the job once every rank is idle; signal: "
        "signal the process like any other",
    )
    scontrol: str = "scontrol"
    scancel: str = "scancel"
    conf: str | None = Field(None, description="slurm.conf for the commands (SLURM_CONF)")
    timeout: Duration = Field(10.0, gt=0, le=60)
    exclude_partitions: tuple[str, ...] = Field((), description="never reclaimed here")
    exclude_accounts: tuple[str, ...] = ()
    rest: SlurmRestSettings | None = Field(None, description="ask slurmrestd, not scontrol")


class KubernetesSettings(Strict):
    """Pod processes are reclaimed through the API server (docs/kubernetes.md)."""

    action: Literal["evict", "delete", "signal"] = Field(
        "evict",
        description="evict: the Eviction API (honours PodDisruptionBudgets); "
        "delete: delete the pod; signal: signal the process like any other",
    )
    kubeconfig: str | None = Field(
        None, description="a kubeconfig file; default: the pod's service account"
    )
    context: str | None = Field(None, description="the kubeconfig's context (default: current)")
    timeout: Duration = Field(10.0, gt=0, le=60)
    policies: bool = Field(True, description="watch GpuReclaimPolicy objects (the CRD)")
    owner_annotation: str = Field(
        "gpu-reclaimer.io/owner",
        min_length=1,
        description="a pod annotation naming its owner (a user name or an e-mail address)",
    )
    keep_annotation: str = Field(
        "gpu-reclaimer.io/keep",
        min_length=1,
        description="a pod annotation asking not to be judged idle before that much runtime "
        "(within the rule's keep_min and keep_max)",
    )


class PromqlPool(Strict):
    """A queue a site already exports: `query`'s value is the number of GPUs waiting for
    the pool's nodes (each a one-GPU request)."""

    pool: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]{1,100}$")
    nodes: tuple[str, ...] = Field(min_length=1, description="node name globs of the pool")
    query: str = Field(min_length=1, description="PromQL: GPUs waiting (a scalar or a vector)")

    @field_validator("query")
    @classmethod
    def _query_is_promql(cls, query: str) -> str:
        """Parsed when the config loads: a query Prometheus would refuse reads as unknown
        demand at every pass, for ever, so it is refused at start instead."""
        import promql_parser  # the actuator extra's; not loaded by the exporter

        try:
            promql_parser.parse(query)
        except ValueError as exc:
            raise ValueError(f"not PromQL: {exc}") from None
        return query


class DemandSettings(Strict):
    """Where waiting requests are read, for rules with `reclaim_when: demand`
    (docs/demand.md). Several sources at once; any that fails makes demand unknown."""

    slurm: bool = Field(False, description="pending GPU jobs, through the `slurm` settings")
    kubernetes: bool = Field(
        False, description="unschedulable Pending pods that request nvidia.com/gpu"
    )
    prometheus: HttpUrl | None = Field(
        None,
        description="Prometheus for `pools` (a base URL)",
    )
    pools: tuple[PromqlPool, ...] = ()
    wait_list: bool = Field(
        False, description="callers of `gpu-reclaimer wait` on this node (server.keep_socket)"
    )
    interval: Duration = Field(10.0, gt=0, le=300, description="how often sources are read")
    timeout: Duration = Field(
        5.0, gt=0, le=60, description="a PromQL query waits no longer (no retries)"
    )
    heartbeat_recent: Duration = Field(
        600.0, ge=0, description="a heartbeat this recent puts a process later in the choice"
    )
    needless_after: Duration = Field(
        NEEDLESS_AFTER_S,
        gt=0,
        description="a reclaimed GPU nobody takes within this long was reclaimed needlessly",
    )

    @model_validator(mode="after")
    def _pools_need_prometheus(self) -> DemandSettings:
        if self.pools and not self.prometheus:
            raise ValueError("pools need prometheus: the URL the queries are sent to")
        return self


class ReconcilerSettings(Strict):
    interval: Duration = Field(0.5, gt=0, le=60)
    recheck_waiting: Duration = Field(
        5.0,
        gt=0,
        le=300,
        description="a warned case waiting out its grace (or for demand) is re-checked live "
        "this often, and at every pass from its deadline on; SIGTERM is always decided on a "
        "fresh re-check",
    )
    parallel: int = Field(
        8, ge=1, le=64, description="nodes whose cases are re-checked at once (agents)"
    )
    lease_ttl: Duration = Field(10.0, gt=0)
    intake_first: Duration = Field(
        60.0,
        ge=0,
        le=600,
        description="while Alertmanager's deliveries keep arriving on this host (one within "
        "0.25 s), the reconciler waits before its next pass, at most this long in a row, so "
        "a storm's acknowledgements come first; 0: never waits",
    )
    stall_after: Duration = Field(
        30.0, gt=0, description="/-/ready fails when no reconciler finished a pass for this long"
    )


class ActuatorConfig(Policy):
    server: Server = Server()
    storage: Storage = Storage()
    node: NodeConfig = Field(default_factory=NodeConfig)
    notifier: NotifierSettings = NotifierSettings()
    reconciler: ReconcilerSettings = ReconcilerSettings()
    operators: OperatorSettings | None = None
    alertmanager: AlertmanagerSettings | None = None
    agents: AgentsSettings | None = None
    slurm: SlurmSettings | None = None
    kubernetes: KubernetesSettings | None = None
    demand: DemandSettings | None = None

    @model_validator(mode="after")
    def _demand_sources_exist(self) -> ActuatorConfig:
        d = self.demand
        if d is not None and d.slurm and self.slurm is None:
            raise ValueError(
                "demand.slurm reads pending jobs through the `slurm` settings: configure slurm"
            )
        if d is not None and d.wait_list and not self.server.keep_socket:
            raise ValueError(
                "demand.wait_list: callers wait through the node's socket: set server.keep_socket"
            )
        if d is not None and d.kubernetes and self.kubernetes is None:
            raise ValueError(
                "demand.kubernetes reads pending pods through the `kubernetes` "
                "settings: configure kubernetes"
            )
        return self

    @model_validator(mode="after")
    def _notice_before_enforcement(self) -> ActuatorConfig:
        enforcing = self.mode == Mode.ENFORCE or any(r.mode == Mode.ENFORCE for r in self.projects)
        if enforcing and self.notice.required and not self.notifier.configured:
            raise ValueError(
                "enforce mode needs a way to warn the owner first: configure notifier.directory "
                "with a channel, or notifier.webhook (or set notice.required: false to enforce "
                "without a delivered notice)"
            )
        return self

    @model_validator(mode="after")
    def _no_instant_kill(self) -> ActuatorConfig:
        timings: list[Any] = [self.defaults, *self.projects]
        for t in timings:
            grace = self.defaults.grace if t.grace is None else t.grace
            term = self.defaults.term_timeout if t.term_timeout is None else t.term_timeout
            mode = getattr(t, "mode", None) or self.mode
            if mode == Mode.ENFORCE and grace == 0 and term == 0:
                where = getattr(t, "name", "defaults")
                raise ValueError(
                    f"{where}: grace 0 and term_timeout 0 in enforce mode would SIGKILL at the "
                    "notice: give the owner a grace period, the process a term_timeout"
                )
        return self


def config_warnings(config: ActuatorConfig) -> list[str]:
    """What is allowed but probably not meant; logged loudly at start and by --check-config."""
    out = []
    p = config.protect
    if not p.protect_root and p.protected_uid_below == 0:
        out.append(
            "protect: root and system uids are not protected (protect_root false, "
            "protected_uid_below 0)"
        )
    if p.replace_default_commands:
        out.append("protect.commands replaces the built-in protected commands")
    if not config.notice.required and config.mode != Mode.OBSERVE:
        out.append(
            "notice.required is false: the grace starts even when the owner's notice "
            "was not delivered"
        )
    if config.mode == Mode.ENFORCE:
        if config.defaults.grace < 60:
            out.append(
                f"enforce mode with a grace of {config.defaults.grace:g}s: owners "
                "have almost no time to react"
            )
        if config.defaults.term_timeout < 1:
            out.append(
                f"term_timeout {config.defaults.term_timeout:g}s: processes get no "
                "time to exit cleanly before SIGKILL"
            )
    if config.mode == Mode.ENFORCE or any(r.mode == Mode.ENFORCE for r in config.projects):
        out += never_acts(config)
    on_demand = config.defaults.reclaim_when == ReclaimWhen.DEMAND or any(
        r.reclaim_when == ReclaimWhen.DEMAND for r in config.projects
    )
    d = config.demand
    if on_demand and (d is None or not (d.slurm or d.kubernetes or d.pools or d.wait_list)):
        out.append(
            "reclaim_when: demand, but no demand source is configured (demand: slurm, "
            "kubernetes, pools or wait_list): demand stays unknown and nothing is reclaimed"
        )
    return out


def never_acts(config: ActuatorConfig) -> list[str]:
    """Limits under which enforcement can never signal: every case would wait, deferred."""
    limits, out = config.limits, []
    if limits.terminations_per_minute == 0:
        out.append(
            "limits.terminations_per_minute is 0: enforce mode can never signal; "
            "every case will be deferred for ever"
        )
    per_node = [
        limits.terminations_per_node_per_hour,
        *(pool.terminations_per_node_per_hour for pool in limits.pools),
    ]
    if not any(per_node):
        out.append(
            "limits.terminations_per_node_per_hour is 0 (and in every pool): enforce "
            "mode can never signal; every case will be deferred for ever"
        )
    elif limits.terminations_per_node_per_hour == 0:
        out.append(
            "limits.terminations_per_node_per_hour is 0: nodes in no pool are never "
            "reclaimed (their cases are deferred for ever)"
        )
    return out


class ConfigError(Exception):
    """The config file is missing, unreadable or invalid; the message names file and rule."""


def load_config(path: str | os.PathLike[str]) -> ActuatorConfig:
    """Parse and validate the YAML file; raise ConfigError naming the file and the rule."""
    return load_model(path, ActuatorConfig)


def load_model(path: str | os.PathLike[str], model: type[M]) -> M:
    """A YAML settings file validated as `model`; ConfigError naming the file and the rule."""
    path = Path(path)
    try:
        data = config_errors.read_yaml(path)
    except config_errors.YamlFileError as exc:
        raise ConfigError(str(exc)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(config_errors.describe(exc, data, str(path))) from None


def merge_config(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it, nested mappings merged key by key."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_config(out[key], value)
        else:
            out[key] = value
    return out
