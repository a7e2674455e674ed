"""The typed values demand is spoken in: a waiting request, and one reading of every source.

A source that fails or answers nonsense raises `DemandError`: demand is then *unknown*, never
*present*, and nothing is reclaimed on it (actuator/demand/fit.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Protocol

MAX_GPUS_PER_NODE = 64  # a request for more on one node is nonsense, not demand


class DemandError(Exception):
    """A source could not be read, or answered nonsense: demand unknown."""


@dataclass(frozen=True)
class Claimant:
    """Whose process a request's hand-off must be: the waiter's uid (`gpu-reclaimer
    wait`), the Slurm job, or the pod (namespace/name). A source that cannot name one
    (a PromQL pool) leaves the request without: its hand-off is never proven."""

    uid: int | None = None
    slurm_job: str | None = None
    pod: str | None = None  # namespace/name

    def describe(self) -> str:
        if self.slurm_job is not None:
            return f"Slurm job {self.slurm_job}"
        if self.pod is not None:
            return f"pod {self.pod}"
        return f"uid {self.uid}"


@dataclass(frozen=True)
class Request:
    """One party waiting for GPUs: `gpus` whole GPUs on one node, or (gpus 0) `memory_bytes`
    free on one GPU. `nodes` are the node names (globs) it may run on; () means any."""

    source: str  # slurm, kubernetes, promql, wait, resume (a suspended job asked back)
    key: str  # unique within its source: a job id, namespace/pod, pool#n, a waiter's id
    who: str  # for people: "Slurm job 4711 of alice" (names are untrusted text)
    gpus: int = 1
    memory_bytes: int | None = None
    nodes: tuple[str, ...] = ()
    since: float | None = None  # when it started waiting (unix seconds), if the source says
    claimant: Claimant | None = None  # whose process proves the hand-off
    on_gpus: tuple[str, ...] = ()  # only these GPUs (UUIDs) serve it; () means any
    first: bool = False  # served before every other request (a restore asked back)

    def __post_init__(self) -> None:
        if not 0 <= self.gpus <= MAX_GPUS_PER_NODE:
            raise DemandError(f"{self.who}: {self.gpus} GPUs on one node is not a request")
        if self.gpus == 0 and not self.memory_bytes:
            raise DemandError(f"{self.who}: asks for neither GPUs nor memory")

    @property
    def ref(self) -> str:
        return f"{self.source}:{self.key}"

    def may_run_on(self, node: str) -> bool:
        return not self.nodes or any(fnmatchcase(node, n) for n in self.nodes)

    def describe(self) -> str:
        wants = f"{self.gpus} GPU(s)" if self.gpus else f"{self.memory_bytes} bytes of GPU memory"
        return f"{self.who} (wants {wants} on one node)"


@dataclass(frozen=True)
class Reading:
    """What one source says: who waits, and (where its scheduler says) how many GPUs are
    already free on each node, unallocated: a request counts them before any reclaim."""

    requests: tuple[Request, ...] = ()
    free: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Demand:
    """Every source's requests at one moment; `down` names each source that failed (its
    error), and any failed source makes the whole reading unknown. `free`: GPUs free per
    node, as the sources' schedulers count them."""

    requests: tuple[Request, ...] = ()
    down: dict[str, str] = field(default_factory=dict)
    read_at: float = 0.0
    free: dict[str, int] = field(default_factory=dict)
    placeholder: bool = False  # no reading yet (unknown, but no source has failed)

    @property
    def known(self) -> bool:
        return not self.down

    def why_unknown(self) -> str:
        return "; ".join(f"{name}: {error}" for name, error in sorted(self.down.items()))


class DemandSource(Protocol):
    """One place requests wait (read-only): a scheduler's queue, a metric, the node's list."""

    name: str

    def read(self) -> Reading:
        """Every request waiting now; DemandError when that cannot be known."""
        ...
