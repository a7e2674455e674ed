"""Demand from Kubernetes: Pending pods that request `nvidia.com/gpu` and that the
scheduler marked unschedulable (condition PodScheduled=False, reason Unschedulable)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from actuator.demand.model import DemandError, Reading, Request
from actuator.schedulers.kube_api import KubeApi, KubeError

GPU_RESOURCE = "nvidia.com/gpu"
HOSTNAME_LABEL = "kubernetes.io/hostname"


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


def pod_request(pod: dict[str, Any]) -> Request | None:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    gpus = pod_gpus(spec)
    since = unschedulable_since(pod.get("status") or {})
    if gpus == 0 or since is False or spec.get("nodeName"):
        return None
    selector = spec.get("nodeSelector") or {}
    nodes = (selector[HOSTNAME_LABEL],) if HOSTNAME_LABEL in selector else ()
    ref = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    return Request(
        source="kubernetes",
        key=ref,
        who=f"pod {ref}",
        gpus=gpus,
        nodes=nodes,
        since=since if isinstance(since, float) else None,
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
            items = json.loads(raw)["items"]
            found = [pod_request(pod) for pod in items]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DemandError(f"the pod list could not be read: {exc}") from None
        return Reading(tuple(r for r in found if r is not None))
