"""Processes a scheduler owns are reclaimed through it: Slurm jobs, Kubernetes pods.

Killing one PID of a Slurm job leaves the allocation held; killing a pod's process makes
the kubelet restart it or keeps the GPU bound. A `Scheduler` therefore

- gates the escalation's SIGTERM step (and the way back to it from its own hold): the
  scheduler's view must prove the process is the workload's, and the workload must be
  ready to go (every rank idle; no disruption budget against it); otherwise the case is
  refused (unknown, mismatched, protected) or deferred under the scheduler's hold reason;
- claims the case at that step (`case.slurm_job`, `case.pod`), and then carries out the
  SIGTERM and SIGKILL steps its own way (scancel; eviction, deletion);
- verifies the result in its own view once the case is reclaimed, for the audit.

The reconciler calls these under its acting lock, one step at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from actuator.schedulers.base import Scheduler, Step, Why, gate
from actuator.schedulers.kube_pods import KubePods
from actuator.schedulers.slurm_jobs import SlurmJobs

if TYPE_CHECKING:
    from actuator.schedulers.kube_api import KubeApi
    from actuator.schedulers.kube_policies import NamespacePolicies

__all__ = ["KubePods", "Scheduler", "Schedulers", "SlurmJobs", "Step", "Why", "gate"]


@dataclass(frozen=True)
class Schedulers:
    """The schedulers a reconciler consults, and what the Kubernetes one needs at run time
    (its namespace policies, watched by the reconciler's thread; the API client)."""

    schedulers: tuple[Scheduler, ...] = ()
    namespaces: NamespacePolicies | None = None
    kube: KubeApi | None = None
