"""Who a GPU process belongs to: user, command, container, job and project.

Computed once per process (PID + start time) and cached, because the labels of
``gpu_process_info`` do not change while the process lives.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from exporter import config_errors
from exporter.cgroup import read_cgroup_identity
from exporter.kube.pod_resources import PodLocator, PodRef
from exporter.procfs import read_status
from exporter.procfs import start_ticks as read_start_ticks
from exporter.slurm import slurm_job_of
from exporter.text import label

PROC = Path("/proc")
_log = logging.getLogger(__name__)
MAX_COMMAND = 64
# python, python3, python3.11, python3.13t, python3.12-dbg, pypy3
_PYTHON = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)*)?t?(?:-dbg)?$")


@dataclass(frozen=True)
class ProcessIdentity:
    """The labels of ``gpu_process_info``; "" where unknown."""

    user: str
    uid: int
    command: str
    container: str = ""
    pod: str = ""  # the pod's name (from the kubelet), "" when unknown
    pod_uid: str = ""  # from the cgroup path
    namespace: str = ""
    job: str = ""
    project: str = ""


class ProjectMappingError(ValueError):
    """The project mapping file is unreadable or invalid; the message names the file."""


class ProjectRule(BaseModel):
    """One project: a process belongs to it if its user, a group or its namespace is listed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _selects_something(self) -> ProjectRule:
        if not (self.users or self.groups or self.namespaces):
            raise ValueError("a project needs at least one of users, groups, namespaces")
        return self

    def matches(self, user: str, groups: Iterable[str], namespace: str) -> bool:
        return (
            user in self.users
            or any(group in self.groups for group in groups)
            or (bool(namespace) and namespace in self.namespaces)
        )


class ProjectMapping(BaseModel):
    """Projects in order; the first rule that matches wins, else ``default_project``.

    Example YAML::

        default_project: shared
        projects:
          - name: vision
            users: [alice, bob]
            groups: [cv-team]
          - name: nlp
            namespaces: [nlp-train]   # needs a pod resolver: cgroups carry no namespace
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    projects: tuple[ProjectRule, ...] = ()
    default_project: str = ""

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ProjectMapping:
        """Read and validate a YAML file; errors name the file and the rule."""
        try:
            data = config_errors.read_yaml(path)
        except config_errors.YamlFileError as error:
            raise ProjectMappingError(str(error)) from None
        data = {} if data is None else data
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise ProjectMappingError(
                config_errors.describe(error, data, os.fspath(path), "project mapping")
            ) from None

    def project_for(self, user: str, groups: Iterable[str], namespace: str) -> str:
        groups = list(groups)
        for rule in self.projects:
            if rule.matches(user, groups, namespace):
                return rule.name
        return self.default_project


def command_name(argv: Sequence[str]) -> str:
    """What runs: the module of ``python -m mod``, the script of ``python script.py``
    (console scripts look like that too), else the program's basename; in its label form
    (exporter/text.py), because the rules' summaries carry it to chat unescaped."""
    if not argv:
        return ""
    program = os.path.basename(argv[0])
    name = program
    if _PYTHON.match(program):
        name = _python_target(argv[1:]) or program
    return label(name[:MAX_COMMAND])


def _python_target(args: Sequence[str]) -> str:
    """Module or script basename from the interpreter's arguments; "" for -c, stdin, none."""
    index = 0
    while index < len(args):
        arg = args[index]
        following = args[index + 1] if index + 1 < len(args) else ""
        if arg == "--":
            return os.path.basename(following)
        if arg == "-":
            return ""  # program on stdin
        if not arg.startswith("-"):
            return os.path.basename(arg)
        if arg.startswith("--"):
            index += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        # A cluster of one-letter options: "-u", "-uB", "-m mod", "-mmod", "-W ignore".
        for position, letter in enumerate(arg[1:], start=2):
            rest = arg[position:]
            if letter == "m":
                return rest or following
            if letter == "c":
                return ""
            if letter in "WX":
                index += 0 if rest else 1  # the value is the next argument
                break
        index += 1
    return ""


class IdentityCache:
    """Identities of processes, computed once per (pid, start_ticks).

    A process is known by its start in clock ticks since boot, never by a start time on the
    wall clock: the kernel's boot time (`btime`, which turns ticks into wall time) moves
    when the clock is stepped or slewed across a second, and a start time compared with
    one computed before that would call every new process a reused PID."""

    def __init__(
        self,
        mapping: ProjectMapping | None = None,
        *,
        proc_root: Path = PROC,
        pods: PodLocator | None = None,
        unnamed_retry: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``pods`` names the pod that holds a GPU (the kubelet's pod-resources API)."""
        self._mapping = mapping or ProjectMapping()
        self._proc_root = proc_root
        self._pods = pods
        self._unnamed_retry, self._clock = unnamed_retry, clock
        self._unnamed: dict[tuple[int, int], tuple[float, ProcessIdentity]] = {}
        self._cache: dict[tuple[int, int], ProcessIdentity] = {}

    def __len__(self) -> int:
        return len(self._cache)

    def get(self, pid: int, start_ticks: int, uuid: str = "") -> ProcessIdentity | None:
        """Identity of the process (on GPU `uuid`), or None when it is gone or its PID now
        names another."""
        key = (pid, start_ticks)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        unnamed = self._unnamed.get(key)
        if unnamed is not None and self._clock() - unnamed[0] < self._unnamed_retry:
            return unnamed[1]
        try:
            identity = self._compute(pid, start_ticks, uuid)
        except (psutil.Error, OSError):
            return None
        if identity is not None and identity.pod_uid and not identity.pod:
            # A pod the kubelet could not name (a shared GPU, the kubelet away) is asked
            # again after `unnamed_retry`, not on every scrape.
            self._unnamed[key] = (self._clock(), identity)
        elif identity is not None:
            self._cache[key] = identity
        return identity

    def prune(self, live: Iterable[tuple[int, int]]) -> None:
        """Forget every process not in ``live`` (call once per scrape with what it saw)."""
        keep = set(live)
        for key in [k for k in self._cache if k not in keep]:
            del self._cache[key]
        for key in [k for k in self._unnamed if k not in keep]:
            del self._unnamed[key]

    def _pod_of(self, pod_uid: str, uuid: str) -> PodRef | None:
        if not pod_uid or not uuid or self._pods is None:
            return None
        try:
            return self._pods.locate(uuid)
        except Exception:  # a failing lookup costs a label, never the scrape
            _log.warning("pod lookup failed for GPU %s", uuid, exc_info=True)
            return None

    def _compute(self, pid: int, start_ticks: int, uuid: str) -> ProcessIdentity | None:
        process = psutil.Process(pid)
        with process.oneshot():
            uid = process.uids().real
            gid = process.gids().real
            argv = process.cmdline()
            command = command_name(argv) if argv else label(process.name()[:MAX_COMMAND])
        user = user_name(uid)
        container = read_cgroup_identity(pid, self._proc_root)
        pod = self._pod_of(container.pod, uuid)
        namespace = pod.namespace if pod else ""
        status = read_status(pid, self._proc_root)
        # Read after the facts above: still the same process, so they were all its own.
        if read_start_ticks(pid, self._proc_root) != start_ticks:
            return None  # gone, or the PID was reused
        supplementary = status.groups if status is not None else ()
        groups = [group_name(g) for g in {gid, *supplementary}]
        return ProcessIdentity(
            user=user,
            uid=uid,
            command=command,
            container=container.container,
            pod=pod.name if pod else "",
            pod_uid=container.pod,
            namespace=namespace,
            job=slurm_job_of(pid, self._proc_root, container.slurm_job),
            project=self._mapping.project_for(user, groups, namespace),
        )


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)  # e.g. a container user unknown to the host


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
