"""The reclaim policy: what may be reclaimed, when, and how fast (strictly validated YAML)."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from exporter.units import parse_duration, parse_size

Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]

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
    r"dcgm.*|nv-hostengine",
)


class Mode(StrEnum):
    OBSERVE = "observe"
    NOTIFY = "notify"
    ENFORCE = "enforce"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timing(Strict):
    """When to act. Any field left out of a project rule keeps the default."""

    idle_for: Duration | None = None
    grace: Duration | None = None
    term_timeout: Duration | None = None
    kill_timeout: Duration | None = None


class Defaults(Strict):
    idle_for: Duration = Field(0.0, description="episode age (since startsAt) before notice")
    grace: Duration = Field(600.0, description="time between the notice and SIGTERM")
    term_timeout: Duration = Field(10.0, description="time between SIGTERM and SIGKILL")
    kill_timeout: Duration = Field(10.0, description="time after SIGKILL before 'unkillable'")
    release_timeout: Duration = Field(5.0, description="time for NVML to show memory freed")


class Idle(Strict):
    """Thresholds of the live re-check (DESIGN §3)."""

    max_sm_util: float = Field(0.05, ge=0, le=1)
    sm_window: Duration = Field(10.0, gt=0)
    max_cpu_cores: float = Field(0.05, ge=0)
    cpu_window: Duration = Field(1.0, gt=0)
    log_quiet_for: Duration = Field(300.0, ge=0)
    memory_growth_bytes: Size = Field(64 * 2**20, ge=0)
    start_time_tolerance: Duration = Field(1.0, ge=0)


class Protect(Strict):
    protect_root: bool = True
    protected_uid_below: int = Field(1000, ge=0)
    users: tuple[str, ...] = ()
    commands: tuple[str, ...] = Field(DEFAULT_PROTECTED_COMMANDS, min_length=1)

    @field_validator("commands")
    @classmethod
    def _compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for index, pattern in enumerate(value):
            if not pattern.strip():
                raise ValueError(f"commands[{index}] is empty")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"commands[{index}] {pattern!r}: {exc}") from None
        return value


class Match(Strict):
    """A project matches when any listed value matches (users OR groups OR ...)."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    labels: tuple[str, ...] = Field((), description="values of the alert's `project` label")

    def is_empty(self) -> bool:
        return not (self.users or self.groups or self.namespaces or self.labels)


class ProjectRule(Timing):
    name: str = Field(min_length=1)
    match: Match
    mode: Mode | None = None
    protected: bool = False

    @field_validator("match")
    @classmethod
    def _non_empty(cls, value: Match) -> Match:
        if value.is_empty():
            raise ValueError("match must name at least one user, group, namespace or label")
        return value


class Limits(Strict):
    terminations_per_node_per_hour: int = Field(10, ge=0)
    terminations_per_minute: int = Field(5, ge=0)


class Breaker(Strict):
    """Open (stop enforcing) when too large a share of monitored processes is flagged."""

    window: Duration = Field(600.0, gt=0)
    max_share: float = Field(0.5, gt=0, le=1)
    min_flagged: int = Field(5, ge=1)


class Policy(Strict):
    mode: Mode = Mode.OBSERVE
    defaults: Defaults = Defaults()
    idle: Idle = Idle()
    protect: Protect = Protect()
    projects: tuple[ProjectRule, ...] = ()
    limits: Limits = Limits()
    breaker: Breaker = Breaker()


class Effective(Strict):
    """The policy that applies to one case, after project overrides."""

    rule: str
    mode: Mode
    protected: bool
    idle_for: float
    grace: float
    term_timeout: float
    kill_timeout: float
    release_timeout: float


def resolve(
    policy: Policy,
    *,
    user: str | None,
    groups: tuple[str, ...],
    namespace: str | None,
    project_label: str | None,
) -> Effective:
    """The first matching project rule, merged over the defaults (pure)."""
    d = policy.defaults
    for index, rule in enumerate(policy.projects):
        m = rule.match
        if (
            (user is not None and user in m.users)
            or any(g in m.groups for g in groups)
            or (namespace is not None and namespace in m.namespaces)
            or (project_label is not None and project_label in m.labels)
        ):
            return Effective(
                rule=f"projects[{index}] {rule.name}",
                mode=rule.mode or policy.mode,
                protected=rule.protected,
                idle_for=d.idle_for if rule.idle_for is None else rule.idle_for,
                grace=d.grace if rule.grace is None else rule.grace,
                term_timeout=d.term_timeout if rule.term_timeout is None else rule.term_timeout,
                kill_timeout=d.kill_timeout if rule.kill_timeout is None else rule.kill_timeout,
                release_timeout=d.release_timeout,
            )
    return Effective(
        rule="defaults",
        mode=policy.mode,
        protected=False,
        idle_for=d.idle_for,
        grace=d.grace,
        term_timeout=d.term_timeout,
        kill_timeout=d.kill_timeout,
        release_timeout=d.release_timeout,
    )
