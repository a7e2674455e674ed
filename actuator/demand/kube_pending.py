"""Demand from Kubernetes: Pending pods that request `nvidia.com/gpu` and that the
scheduler marked unschedulable (condition PodScheduled=False, reason Unschedulable), each
on the nodes its required rules allow (actuator/demand/kube_nodes.py)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from actuator.demand.kube_nodes import GPU_RESOURCE, KubeNode, eligible_nodes, parse_nodes
from actuator.demand.model import Claimant, DemandError, Reading, Request
from actuator.schedulers.kube_api import KubeApi, KubeError


def _gpus(container: dict[str, Any]) -> int:
    resources = container.get("resources") or {}
    for kind in ("limits", "requests"):  # extended resources: limits, requests equal
        value = (resources.get(kind) or {}).get(GPU_RESOURCE)
        if value is not None:
            if not str(value).isdecimal():
                raise DemandError(f"{GPU_RESOURCE} {value!r} is not a whole number")
            return int(value)
    return 0


def pod_gpus(spec: dict[str, Any]) -> int:
    """GPUs the pod needs on its node: its containers together, or its largest init
    container (init containers run one at a time, before the others)."""
    containers = sum(_gpus(c) for c in spec.get("containers") or [])
    init = max((_gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(containers, init)


def unschedulable_since(status: dict[str, Any]) -> float | bool | None:
    """When the scheduler marked the pod unschedulable; False when it has not."""
    for condition in status.get("conditions") or []:
        if (condition.get("type"), condition.get("status"), condition.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            stamp = condition.get("lastTransitionTime")
            try:
                return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
            except ValueError:
                return None
    return False


def waits_for_gpus(pod: dict[str, Any]) -> bool:
    """An unschedulable pod, on no node yet, that asks for GPUs."""
    spec = pod.get("spec") or {}
    since = unschedulable_since(pod.get("status") or {})
    return since is not False and not spec.get("nodeName") and pod_gpus(spec) > 0


def pod_request(pod: dict[str, Any], nodes: list[KubeNode]) -> Request | None:
    """The pod's request on the nodes it may run on; None when it waits for no GPU, or no
    node can take it (it would mean any node)."""
    if not waits_for_gpus(pod):
        return None
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    gpus = pod_gpus(spec)
    since = unschedulable_since(pod.get("status") or {})
    names = eligible_nodes(spec, gpus, nodes)
    if not names:
        return None
    ref = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    return Request(
        source="kubernetes",
        key=ref,
        who=f"pod {ref}",
        gpus=gpus,
        nodes=names,
        since=since if isinstance(since, float) else None,
        claimant=Claimant(pod=ref),
    )


class PendingPods:
    name = "kubernetes"

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def read(self) -> Reading:
        try:
            raw = self.api.pending_pods()
        except KubeError as exc:
            raise DemandError(str(exc)) from None
        try:
            waiting = [pod for pod in json.loads(raw)["items"] if waits_for_gpus(pod)]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DemandError(f"the pod list could not be read: {exc}") from None
        if not waiting:
            return Reading(())
        try:  # read only when a pod waits: where it may run
            raw_nodes = self.api.nodes()
        except KubeError as exc:
            raise DemandError(str(exc)) from None
        try:
            nodes = parse_nodes(json.loads(raw_nodes)["items"])
            found = [pod_request(pod, nodes) for pod in waiting]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DemandError(f"the node list could not be read: {exc}") from None
        return Reading(tuple(r for r in found if r is not None))
