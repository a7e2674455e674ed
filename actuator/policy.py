"""The reclaim policy: what may be reclaimed, when, and how fast (strictly validated YAML)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from exporter.units import format_duration, parse_duration, parse_size

Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]
Port = Annotated[int, Field(ge=1, le=65535)]

# Long-running services that hold a GPU on purpose. Matched (re.fullmatch) against the
# executable's name, argv[0]'s name, the Python module of `python -m MOD` and the name of a
# Python script. Jupyter *kernels* (`python -m ipykernel_launcher`) deliberately match none.
DEFAULT_PROTECTED_COMMANDS: tuple[str, ...] = (
    r"jupyter(-lab|-notebook|-server|-labhub|hub|hub-singleuser)?",
    r"jupyter_server(\..*)?",
    r"jupyterlab(\..*)?",
    r"notebook(\.app)?",
    r"tensorboard(\..*)?",
    r"streamlit(\..*)?",
    r"nvidia-persistenced",
    r"nvidia-smi",
    # MPS: the server holds a context for every client on its GPU; ending it ends them all.
    r"nvidia-cuda-mps-(server|control)",
    r"dcgm.*|nv-hostengine",
)


class Mode(StrEnum):
    OBSERVE = "observe"
    NOTIFY = "notify"
    ENFORCE = "enforce"


class ReclaimWhen(StrEnum):
    """When an idle process is reclaimed: once idle past its grace, or only when someone
    waits for the GPU it holds (docs/demand.md)."""

    IDLE = "idle"
    DEMAND = "demand"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timing(Strict):
    """When to act. Any field left out of a project rule keeps the default."""

    idle_for: Duration | None = None
    min_runtime: Duration | None = None
    keep_min: Duration | None = None
    keep_max: Duration | None = None
    grace: Duration | None = None
    term_timeout: Duration | None = None
    kill_timeout: Duration | None = None
    service_window: Duration | None = None
    service_reclaim_when: ReclaimWhen | None = None
    service_ports: tuple[Port, ...] | None = None
    presence_grace: Duration | None = None
    suspend: bool | None = None
    suspend_max: Duration | None = None

    @model_validator(mode="after")
    def _keep_bounds_in_order(self) -> Timing:
        _check_keep_bounds(self.keep_min, self.keep_max)
        return self


def _check_keep_bounds(low: float | None, high: float | None) -> None:
    if low is not None and high is not None and low > high:
        raise ValueError(f"keep_min ({low:g}s) is above keep_max ({high:g}s)")


class Defaults(Strict):
    idle_for: Duration = Field(0.0, description="episode age (since startsAt) before notice")
    min_runtime: Duration = Field(
        600.0,
        description="a process younger than this is never judged idle (start-up, data "
        "loading, compilation): no notice before it has run this long",
    )
    keep_min: Duration = Field(
        0.0,
        description="the shortest allowance an owner may ask with GPU_RECLAIMER_KEEP "
        "(not judged idle before that much runtime)",
    )
    keep_max: Duration = Field(
        86400.0, description="the longest allowance an owner may ask with GPU_RECLAIMER_KEEP"
    )
    grace: Duration = Field(600.0, description="time between the notice and SIGTERM")
    term_timeout: Duration = Field(10.0, description="time between SIGTERM and SIGKILL")
    kill_timeout: Duration = Field(10.0, description="time after SIGKILL before 'unkillable'")
    release_timeout: Duration = Field(5.0, description="time for NVML to show memory freed")
    presence_grace: Duration = Field(
        0.0,
        description="how much longer than the grace an idle process waits, deferred, while "
        "its owner is present on the node (a terminal used within presence_idle, or a "
        "notebook tab connected); 0: presence changes nothing",
    )
    presence_idle: Duration = Field(
        1800.0, description="a login session whose terminal saw input this recently is presence"
    )
    suspend: bool = Field(
        False,
        description="after the grace, checkpoint an eligible process's GPU state into its host "
        "memory (the suspend rung) before any signal: the GPU is freed, the work kept",
    )
    suspend_max: Duration = Field(
        86400.0, gt=0, description="a suspended process is sent SIGTERM after this"
    )
    suspend_timeout: Duration = Field(
        120.0, gt=0, description="the node must prove the checkpoint within this, else SIGTERM"
    )
    suspend_lock_timeout: Duration = Field(
        10.0, gt=0, le=60, description="the driver's lock waits this long for the process to stop"
    )
    suspend_restore_retry: Duration = Field(
        30.0, gt=0, description="a restore refused for room on the GPU is tried again after this"
    )
    suspend_host_reserve: Size = Field(
        2 * 1024**3,
        ge=0,
        description="host memory kept free: a suspended process is sent SIGTERM below it",
    )
    reclaim_when: ReclaimWhen = Field(
        ReclaimWhen.IDLE,
        description="idle: after the grace; demand: only when a waiting "
        "request this GPU can serve appears (the grace starts then)",
    )
    # Services (a process tree listening on a port other hosts can reach, or on a port
    # named here): idle between bursts of requests is what they do (docs/actuator.md).
    service_window: Duration = Field(
        3600.0, ge=0, description="a service is not warned before it was quiet this long"
    )
    service_reclaim_when: ReclaimWhen = Field(
        ReclaimWhen.DEMAND,
        description="when a quiet service is reclaimed (demand: only when "
        "someone waits for its GPU)",
    )
    service_ports: tuple[Port, ...] = Field(
        (), description="ports that make a process a service even where it listens on loopback"
    )

    @model_validator(mode="after")
    def _keep_bounds_in_order(self) -> Defaults:
        _check_keep_bounds(self.keep_min, self.keep_max)
        return self


class Idle(Strict):
    """Windows of the live re-check. The thresholds themselves (util, CPU, memory growth)
    are the rules' own: read from `rules_file`, else the shipped rules' values."""

    rules_file: str | None = Field(None, description="the alert rules Prometheus evaluates")
    sm_window: Duration = Field(10.0, gt=0)
    cpu_window: Duration = Field(1.0, gt=0)
    log_quiet_for: Duration = Field(300.0, ge=0)
    rearm_after: Duration = Field(
        300.0,
        gt=0,
        description="after activity cancelled (or unknown evidence refused) a case whose "
        "alert still fires",
    )


def _check_patterns(value: tuple[str, ...], key: str) -> tuple[str, ...]:
    for index, pattern in enumerate(value):
        if not pattern.strip():
            raise ValueError(f"{key}[{index}] is empty")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{key}[{index}] {pattern!r}: {exc}") from None
        if compiled.fullmatch(""):
            # '$^', 'a*': matches only an empty name, and names are never empty
            raise ValueError(f"{key}[{index}] {pattern!r} matches the empty name: protects nothing")
    return value


class Protect(Strict):
    protect_root: bool = True
    protected_uid_below: int = Field(1000, ge=0)
    users: tuple[str, ...] = ()
    commands: tuple[str, ...] = Field(DEFAULT_PROTECTED_COMMANDS, min_length=1)
    extra_commands: tuple[str, ...] = ()
    replace_default_commands: bool = False

    @model_validator(mode="after")
    def _replacing_is_explicit(self) -> Protect:
        if "commands" in self.model_fields_set and not self.replace_default_commands:
            raise ValueError(
                "commands replaces the built-in protected commands (Jupyter servers, "
                "TensorBoard, nvidia-persistenced, ...): add yours with extra_commands, or set "
                "replace_default_commands: true to replace the list"
            )
        return self

    @field_validator("commands")
    @classmethod
    def _commands(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_patterns(value, "commands")

    @field_validator("extra_commands")
    @classmethod
    def _extra(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_patterns(value, "extra_commands")

    @property
    def effective_commands(self) -> tuple[str, ...]:
        return (*self.commands, *self.extra_commands)


class Match(Strict):
    """Which processes a project rule is for. The rule *applies* when any node fact
    matches: the process's user, a unix group, its container namespace or the project
    the node's mapping gives it. Alert labels (`labels`: the alert's `project` label,
    `namespaces`: its `namespace` label) are claims: a rule they match may only make the
    decision safer, never select enforcement."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    nodes: tuple[str, ...] = Field(
        (), description="node name globs: a node pool (the node answered as itself)"
    )
    namespaces: tuple[str, ...] = ()
    projects: tuple[str, ...] = Field((), description="project names of the node's mapping")
    partitions: tuple[str, ...] = Field((), description="a Slurm job's partition (scontrol)")
    accounts: tuple[str, ...] = Field((), description="a Slurm job's account (scontrol)")
    labels: tuple[str, ...] = Field((), description="values of the alert's `project` label")

    def is_empty(self) -> bool:
        return not (
            self.users
            or self.groups
            or self.nodes
            or self.namespaces
            or self.projects
            or self.partitions
            or self.accounts
            or self.labels
        )

    def matches_facts(self, facts: Facts) -> bool:
        return (
            (facts.user is not None and facts.user in self.users)
            or any(g in self.groups for g in facts.groups)
            or (bool(facts.node) and any(fnmatchcase(facts.node, n) for n in self.nodes))
            or (bool(facts.namespace) and facts.namespace in self.namespaces)
            or (bool(facts.project) and facts.project in self.projects)
            or (bool(facts.partition) and facts.partition in self.partitions)
            or (bool(facts.account) and facts.account in self.accounts)
        )

    def matches_claims(self, claims: Claims) -> bool:
        return (bool(claims.project) and claims.project in self.labels) or (
            bool(claims.namespace) and claims.namespace in self.namespaces
        )


class ProjectRule(Timing):
    name: str = Field(min_length=1)
    match: Match
    mode: Mode | None = None
    protected: bool = False
    reclaim_when: ReclaimWhen | None = None

    @field_validator("match")
    @classmethod
    def _non_empty(cls, value: Match) -> Match:
        if value.is_empty():
            raise ValueError(
                "match must name at least one user, group, node, namespace, project, "
                "partition, account or label"
            )
        return value


class NodePoolLimit(Strict):
    nodes: tuple[str, ...] = Field(min_length=1, description="node name globs (dgx-*)")
    terminations_per_node_per_hour: int = Field(ge=0)


class Limits(Strict):
    terminations_per_node_per_hour: int = Field(10, ge=0)
    terminations_per_minute: int = Field(5, ge=0, description="fleet-wide")
    pools: tuple[NodePoolLimit, ...] = Field(
        (), description="per node pool: the first pool whose globs match the node wins"
    )

    def per_node_hour(self, node: str) -> int:
        for pool in self.pools:
            if any(fnmatchcase(node, glob) for glob in pool.nodes):
                return pool.terminations_per_node_per_hour
        return self.terminations_per_node_per_hour


class Breaker(Strict):
    """Open (stop enforcing) when too large a share of monitored processes is flagged."""

    window: Duration = Field(600.0, gt=0)
    max_share: float = Field(0.5, gt=0, le=1)
    min_flagged: int = Field(5, ge=1)


class Notice(Strict):
    """The gate before any signal: enforcement starts only after a delivered notice."""

    required: bool = Field(
        True, description="enforce mode needs a notifier; SIGTERM waits for a delivered notice"
    )
    retries: int = Field(3, ge=0, le=100, description="resends after a failed notice")
    retry_interval: Duration = Field(30.0, gt=0)
    undelivered: Literal["refuse", "extra_grace"] = Field(
        "refuse",
        description="after the last failed resend: refuse the case, or start an extended grace",
    )
    extra_grace: Duration = Field(3600.0, ge=0, description="added to the grace (extra_grace)")


class RepeatStep(Strict):
    """What follows once an owner's jobs were reclaimed `after` times within the window."""

    after: int = Field(ge=1, description="earlier reclaims of the owner's within the window")
    grace: Duration | None = Field(None, gt=0, description="a shorter grace (never longer)")
    copy_project: bool = Field(False, description="the project's contact gets the notice too")
    keep_needs_sre: bool = Field(
        False, description="the owner's keeps (command, page) wait for an SRE's snooze"
    )


class Repeat(Strict):
    """Repeat habits: per owner, a rolling count of reclaims, and the steps it triggers."""

    window: Duration = Field(30 * 86400.0, gt=0)
    steps: tuple[RepeatStep, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _steps_in_order(self) -> Repeat:
        afters = [s.after for s in self.steps]
        if afters != sorted(set(afters)):
            raise ValueError(f"repeat.steps: `after` must increase from step to step: {afters}")
        return self


class Policy(Strict):
    mode: Mode = Mode.OBSERVE
    notice: Notice = Notice()
    defaults: Defaults = Defaults()
    idle: Idle = Idle()
    protect: Protect = Protect()
    projects: tuple[ProjectRule, ...] = ()
    limits: Limits = Limits()
    breaker: Breaker = Breaker()
    repeat: Repeat | None = None


class Effective(Strict):
    """The policy that applies to one case, after project overrides."""

    rule: str
    mode: Mode
    protected: bool
    idle_for: float
    grace: float
    min_runtime: float = 0.0
    keep_min: float = 0.0
    keep_max: float = 86400.0
    term_timeout: float
    kill_timeout: float
    release_timeout: float
    reclaim_when: ReclaimWhen = ReclaimWhen.IDLE
    presence_grace: float = 0.0
    presence_idle: float = 1800.0
    suspend: bool = False
    suspend_max: float = 86400.0
    suspend_timeout: float = 120.0
    suspend_lock_timeout: float = 10.0
    suspend_restore_retry: float = 30.0
    suspend_host_reserve: int = 2 * 1024**3
    # The service class: set when the node (or, only ever to be safer, the alert) says the
    # process is a service; the three service_* values are the rule's, applied when it is.
    service: bool = False
    service_window: float = 3600.0
    service_reclaim_when: ReclaimWhen = ReclaimWhen.DEMAND
    service_ports: tuple[int, ...] = ()
    # What made it a service, as the notice names it (policy.ServiceEvidence; "alert": the
    # alert's class alone): how, the ports, clients open, since the last client, watched.
    service_by: str = ""
    service_seen_ports: tuple[int, ...] = ()
    service_clients: int = 0
    service_client_ago: float | None = None
    service_watched: float | None = None
    # Repeat habits (`repeat`): the owner's earlier reclaims within the window when a step
    # applies (0: none), the window, and whether the project's contact is copied.
    repeat_prior: int = 0
    repeat_window: float = 0.0
    copy_project: bool = False
    keep_needs_sre: bool = False


@dataclass(frozen=True)
class Facts:
    """What the node itself says about the process."""

    user: str | None = None
    groups: tuple[str, ...] = ()
    namespace: str = ""
    project: str = ""
    node: str = ""  # the node whose agent (or this host) answered the re-check
    partition: str = ""  # the scheduler's word: a Slurm job's partition and account
    account: str = ""
    # What the process tree listens on and serves, as the node read it: a port other hosts
    # reach that is not the job's own rendezvous (`listens_external`), every port (which the
    # rule's `service_ports` may name), clients connected now, since one was last seen (s;
    # None: never), how long the node has watched the tree (s; None: not read).
    listens_external: bool = False
    listen_ports: tuple[int, ...] = ()
    clients: int = 0
    client_ago: float | None = None
    watched_for: float | None = None
    # The node sees the hang's signature (SM busy), so a Stalled alert is about a hang.
    busy: bool = False

    def is_service(self, eff: Effective) -> bool:
        return self.service_evidence(eff) is not None

    def service_evidence(self, eff: Effective) -> ServiceEvidence | None:
        """Why the process is a service (None when it is not): declared by a port the rule
        names, or a listener other hosts reach with a client within the service window, or
        one not yet watched that long (unproven is a service: unknown is never idle)."""
        declared = tuple(sorted(set(self.listen_ports) & set(eff.service_ports)))
        if declared:
            return ServiceEvidence("declared", declared)
        if not self.listens_external:
            return None
        ports = tuple(self.listen_ports)
        if self.clients:
            return ServiceEvidence("clients", ports, clients=self.clients)
        if self.client_ago is not None and self.client_ago < eff.service_window:
            return ServiceEvidence("client", ports, client_ago=self.client_ago)
        if self.watched_for is None or self.watched_for < eff.service_window:
            return ServiceEvidence("unproven", ports, watched=self.watched_for)
        return None


@dataclass(frozen=True)
class ServiceEvidence:
    """What the node saw that makes a process a service: `declared` (a port the rule names
    in `service_ports`), `clients` (connections open now), `client` (one within the
    service window), `unproven` (a listener other hosts reach, watched for less than the
    window: no client came yet, and none can be ruled out)."""

    by: str
    ports: tuple[int, ...]
    clients: int = 0
    client_ago: float | None = None
    watched: float | None = None  # seconds the node has watched it (None: not at all)

    def text(self, window: float) -> str:
        ports = _ports(self.ports)
        if self.by == "declared":
            return f"listens on port {ports}, named in service_ports"
        if self.by == "clients":
            return f"{self.clients} client connection(s) open on port {ports}"
        if self.by == "client":
            return f"a client on port {ports} {format_duration(self.client_ago or 0.0)} ago"
        seen = (
            "not watched"
            if self.watched is None
            else f"watched for {format_duration(self.watched)}"
        )
        return (
            f"listens on port {ports} where other hosts reach it, {seen} of the "
            f"{format_duration(window)} that would prove no client comes"
        )


def _ports(ports: Iterable[int]) -> str:
    return ", ".join(str(p) for p in ports) or "?"


@dataclass(frozen=True)
class Claims:
    """What the alert's labels say; anyone who can reach the webhook can write them."""

    project: str = ""
    namespace: str = ""
    service: bool = False  # the alert's class is `service` (it can only make a rule safer)
    stalled: bool = False  # a GpuProcessStalled alert: never softened where the node sees a hang


_MODE_ORDER = {Mode.OBSERVE: 0, Mode.NOTIFY: 1, Mode.ENFORCE: 2}


def gentler(mode: Mode, other: Mode) -> Mode:
    """The gentler of two modes (observe < notify < enforce)."""
    return min(mode, other, key=_MODE_ORDER.__getitem__)


def _effective(policy: Policy, index: int | None) -> Effective:
    d = policy.defaults
    if index is None:
        return Effective(
            rule="defaults",
            mode=policy.mode,
            protected=False,
            idle_for=d.idle_for,
            min_runtime=d.min_runtime,
            keep_min=d.keep_min,
            keep_max=d.keep_max,
            grace=d.grace,
            term_timeout=d.term_timeout,
            kill_timeout=d.kill_timeout,
            release_timeout=d.release_timeout,
            reclaim_when=d.reclaim_when,
            presence_grace=d.presence_grace,
            presence_idle=d.presence_idle,
            suspend=d.suspend,
            suspend_max=d.suspend_max,
            suspend_timeout=d.suspend_timeout,
            suspend_lock_timeout=d.suspend_lock_timeout,
            suspend_restore_retry=d.suspend_restore_retry,
            suspend_host_reserve=d.suspend_host_reserve,
            service_window=d.service_window,
            service_reclaim_when=d.service_reclaim_when,
            service_ports=d.service_ports,
        )
    rule = policy.projects[index]
    return Effective(
        rule=f"projects #{index + 1} ({rule.name})",
        mode=rule.mode or policy.mode,
        protected=rule.protected,
        idle_for=d.idle_for if rule.idle_for is None else rule.idle_for,
        min_runtime=d.min_runtime if rule.min_runtime is None else rule.min_runtime,
        keep_min=d.keep_min if rule.keep_min is None else rule.keep_min,
        keep_max=d.keep_max if rule.keep_max is None else rule.keep_max,
        grace=d.grace if rule.grace is None else rule.grace,
        term_timeout=d.term_timeout if rule.term_timeout is None else rule.term_timeout,
        kill_timeout=d.kill_timeout if rule.kill_timeout is None else rule.kill_timeout,
        release_timeout=d.release_timeout,
        reclaim_when=rule.reclaim_when or d.reclaim_when,
        presence_grace=d.presence_grace if rule.presence_grace is None else rule.presence_grace,
        presence_idle=d.presence_idle,
        suspend=d.suspend if rule.suspend is None else rule.suspend,
        suspend_max=d.suspend_max if rule.suspend_max is None else rule.suspend_max,
        suspend_timeout=d.suspend_timeout,
        suspend_lock_timeout=d.suspend_lock_timeout,
        suspend_restore_retry=d.suspend_restore_retry,
        suspend_host_reserve=d.suspend_host_reserve,
        service_window=d.service_window if rule.service_window is None else rule.service_window,
        service_reclaim_when=rule.service_reclaim_when or d.service_reclaim_when,
        service_ports=d.service_ports if rule.service_ports is None else rule.service_ports,
    )


def _safer_when(one: ReclaimWhen, other: ReclaimWhen) -> ReclaimWhen:
    # demand reclaims a subset of what idle reclaims: the safer of the two
    return ReclaimWhen.DEMAND if ReclaimWhen.DEMAND in (one, other) else ReclaimWhen.IDLE


def as_service(eff: Effective, evidence: ServiceEvidence | None = None) -> Effective:
    """The rule as it applies to a service: reclaimed only as `service_reclaim_when` says
    (by default when someone waits for its GPU), never before `service_window` of quiet.
    `evidence`: what made it one, named in the rule's text and kept for the notice (None:
    the alert's class alone)."""
    if eff.service:
        return eff
    said = evidence.text(eff.service_window) if evidence else "its alert says so"
    return eff.model_copy(
        update={
            "rule": f"{eff.rule}, as a service ({said})",
            "service_by": evidence.by if evidence else "alert",
            "service_seen_ports": evidence.ports if evidence else (),
            "service_clients": evidence.clients if evidence else 0,
            "service_client_ago": evidence.client_ago if evidence else None,
            "service_watched": evidence.watched if evidence else None,
            "service": True,
            # never harsher than the rule's own (a claim may only make it safer)
            "reclaim_when": _safer_when(eff.reclaim_when, eff.service_reclaim_when),
            "idle_for": max(eff.idle_for, eff.service_window),
        }
    )


def safer(base: Effective, other: Effective) -> Effective:
    """`base`, made at least as safe as `other` field by field (pure)."""
    mode = gentler(base.mode, other.mode)
    merged = base.model_copy(
        update={
            "mode": mode,
            "protected": base.protected or other.protected,
            "idle_for": max(base.idle_for, other.idle_for),
            "min_runtime": max(base.min_runtime, other.min_runtime),
            # the wider bounds leave the owner more say
            "keep_min": min(base.keep_min, other.keep_min),
            "keep_max": max(base.keep_max, other.keep_max),
            "grace": max(base.grace, other.grace),
            "term_timeout": max(base.term_timeout, other.term_timeout),
            "kill_timeout": max(base.kill_timeout, other.kill_timeout),
            # the owner's presence holds the process longer, and more of it counts
            "presence_grace": max(base.presence_grace, other.presence_grace),
            "presence_idle": max(base.presence_idle, other.presence_idle),
            # a suspend keeps the work: the safer rung, kept longer
            "suspend": base.suspend or other.suspend,
            "suspend_max": max(base.suspend_max, other.suspend_max),
            # demand reclaims a subset of what idle reclaims: the safer of the two
            "reclaim_when": _safer_when(base.reclaim_when, other.reclaim_when),
            "service_window": max(base.service_window, other.service_window),
            "service_reclaim_when": _safer_when(
                base.service_reclaim_when, other.service_reclaim_when
            ),
            "service_ports": tuple(sorted({*base.service_ports, *other.service_ports})),
        }
    )
    if merged == base:
        return base
    return merged.model_copy(update={"rule": f"{base.rule}, made safer by {other.rule}"})


def resolve(policy: Policy, facts: Facts, claims: Claims = Claims()) -> Effective:
    """The first project rule the node's facts match, merged over the defaults; a rule the
    alert's labels match can only make it safer; a service (the node's listeners, or the
    alert's class) gets the rule's service class (pure)."""
    by_facts = next(
        (i for i, rule in enumerate(policy.projects) if rule.match.matches_facts(facts)), None
    )
    eff = _effective(policy, by_facts)
    for index, rule in enumerate(policy.projects):
        if index != by_facts and rule.match.matches_claims(claims):
            eff = safer(eff, _effective(policy, index))
            break
    if claims.stalled and facts.busy:
        return eff  # a hang is judged as a hang: its rank's sockets never make it a service
    evidence = facts.service_evidence(eff)
    if evidence is not None or claims.service:
        eff = as_service(eff, evidence)
    return eff
