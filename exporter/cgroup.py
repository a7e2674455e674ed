"""Container, pod and Slurm job of a process, from its /proc/<pid>/cgroup file.

The cgroup path names the container runtime's scope, the Kubernetes pod UID and the Slurm
job, in both cgroup v1 (``N:controllers:/path`` per hierarchy) and v2 (``0::/path``).

The Kubernetes *namespace* is not in any cgroup path, so ``namespace`` is always "" here;
a caller that knows pods (e.g. from the kubelet) fills it in by pod UID.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from exporter.procfs import read_proc_bytes

PROC = Path("/proc")

_ID = r"(?P<id>[0-9a-f]{12,64})"
# Runtime scopes as the systemd cgroup driver names them (".scope" optional for cgroupfs).
# The conmon monitors ("crio-conmon-", "libpod-conmon-") do not match: "conmon" is not hex.
_SCOPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"^docker-{_ID}\.scope$"), "docker"),
    (re.compile(rf"^cri-containerd-{_ID}\.scope$"), "containerd"),
    (re.compile(rf"^nerdctl-{_ID}\.scope$"), "containerd"),
    (re.compile(rf"^crio-{_ID}(?:\.scope)?$"), "cri-o"),
    (re.compile(rf"^libpod-{_ID}(?:\.scope)?$"), "podman"),
)
_BARE_ID = re.compile(r"^[0-9a-f]{64}$")
# "pod<uid>" (cgroupfs) or "kubepods-burstable-pod<uid>.slice" (systemd, '-' written as '_').
_POD = re.compile(
    r"^(?:kubepods(?:-[a-z]+)*-)?pod"
    r"(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
    r"(?:\.slice)?$"
)
# "/slurm/uid_1000/job_123/step_0", "/slurm_node01/uid_1000/job_123", and v2's
# "/system.slice/slurmstepd.scope/job_123/step_0".
_SLURM_JOB = re.compile(r"(?:^|/)[^/]*slurm[^/]*/(?:.*/)?job_(?P<job>\d+)(?:/|$)")


@dataclass(frozen=True)
class ContainerIdentity:
    """Where a process runs; every field is "" when unknown."""

    container: str = ""
    pod: str = ""
    namespace: str = ""
    runtime: str = ""
    slurm_job: str = ""


def parse_cgroup(text: str) -> ContainerIdentity:
    """Identity from the content of /proc/<pid>/cgroup; never raises."""
    container = runtime = pod = job = ""
    for path in _paths(text):
        if not container:
            container, runtime = _container(path)
        if not pod:
            pod = _pod(path)
        if not job:
            match = _SLURM_JOB.search(path)
            job = match.group("job") if match else ""
    return ContainerIdentity(container=container, pod=pod, runtime=runtime, slurm_job=job)


def read_cgroup_identity(pid: int, proc_root: Path = PROC) -> ContainerIdentity:
    """Identity of a running process; empty when the process is gone or unreadable."""
    raw = read_proc_bytes(f"{proc_root}/{pid}/cgroup")
    if raw is None:
        return ContainerIdentity()
    return parse_cgroup(raw.decode("utf-8", "replace"))


def _paths(text: str) -> list[str]:
    """Cgroup paths, the v2 (unified) one first: it is what a v2 or hybrid host manages."""
    unified: list[str] = []
    legacy: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, _controllers, path = parts
        (unified if hierarchy == "0" else legacy).append(path)
    return unified + legacy


def _container(path: str) -> tuple[str, str]:
    """(container id, runtime) of the innermost container scope in one path."""
    parts = [p for p in path.split("/") if p]
    # Innermost first: in docker-in-docker or kind the deepest scope is the process's own.
    for index in range(len(parts) - 1, -1, -1):
        part = parts[index]
        for pattern, runtime in _SCOPES:
            match = pattern.match(part)
            if match:
                return match.group("id"), runtime
        if _BARE_ID.match(part):
            parent = parts[index - 1] if index else ""
            return part, _bare_runtime(parent)
    return "", ""


def _bare_runtime(parent: str) -> str:
    """Runtime of a bare 64-hex id (cgroupfs driver), guessed from its parent directory."""
    if parent == "docker":
        return "docker"
    if _POD.match(parent):
        # A bare id under a pod: containerd. CRI-O prefixes "crio-"; dockershim is gone
        # since Kubernetes 1.24.
        return "containerd"
    return ""


def _pod(path: str) -> str:
    """Pod UID in its usual dashed form (the systemd driver writes '_' for '-')."""
    for part in path.split("/"):
        match = _POD.match(part)
        if match:
            return match.group("uid").replace("_", "-")
    return ""
