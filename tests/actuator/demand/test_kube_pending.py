"""Demand from Kubernetes (actuator/demand/kube_pending.py): unschedulable Pending pods that
request GPUs, through the official client against the API server stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from actuator.demand import DemandError, Request
from actuator.demand.kube_pending import PendingPods, pod_request
from actuator.schedulers.kube_api import KubeApi
from tests.helpers.kube import ApiServer


def _pod(name: str, gpus: str | None, *, reason: str = "Unschedulable", **spec) -> dict:
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}}
    return {
        "metadata": {"namespace": "ml", "name": name},
        "spec": {"containers": [container], **spec},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": reason,
                    "lastTransitionTime": "2026-12-02T06:00:00Z",
                }
            ],
        },
    }


def test_pending_pods_through_the_api_server(tmp_path: Path) -> None:
    with ApiServer(tmp_path) as server:
        server.pending = [
            _pod("train", "2", nodeSelector={"kubernetes.io/hostname": "gpu-a-1"}),
            _pod("cpu-only", None),
            _pod("waiting-for-image", "1", reason="SchedulingGated"),
        ]
        api = KubeApi.connect(str(server.kubeconfig()))
        (request,) = PendingPods(api).read().requests
        assert request == Request(
            source="kubernetes",
            key="ml/train",
            who="pod ml/train",
            gpus=2,
            nodes=("gpu-a-1",),
            since=1796191200.0,
        )
        assert ("GET", "/api/v1/pods?fieldSelector=status.phase%3DPending") in server.requests
        server.pending = [_pod("odd", "two")]
        with pytest.raises(DemandError):
            PendingPods(api).read()
    with pytest.raises(DemandError):  # the API server is gone
        PendingPods(api).read()


def test_a_pod_bound_to_a_node_or_without_gpus_is_no_request() -> None:
    assert pod_request(_pod("bound", "1", nodeName="gpu-a-1")) is None
    init = _pod("init", "1")
    init["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    ]
    request = pod_request(init)
    assert request is not None and request.gpus == 4
