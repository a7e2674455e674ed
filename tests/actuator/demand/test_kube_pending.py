"""Demand from Kubernetes (actuator/demand/kube_pending.py, kube_nodes.py): unschedulable
Pending pods that request GPUs, each on the nodes the scheduler's required rules allow
(selector, required node affinity, taints, cordons, allocatable GPUs), through the official
client against the API server stand-in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actuator.demand import Claimant, DemandError, Request
from actuator.demand.kube_nodes import eligible_nodes, parse_nodes
from actuator.demand.kube_pending import PendingPods, pod_request
from actuator.schedulers.kube_api import KubeApi
from tests.helpers.kube import ApiServer, gpu_node

NO_SCHEDULE = "NoSchedule"


def _pod(name: str, gpus: str | None, *, reason: str = "Unschedulable", **spec: Any) -> dict:
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


# A small cluster: two A100 pools, an H100 node tainted for one team, a cordoned node, a
# CPU node, and one with four GPUs.
NODES = [
    gpu_node("gpu-a-1", labels={"gpu-type": "a100", "zone": "z1", "gpu-count": "8"}),
    gpu_node("gpu-a-2", labels={"gpu-type": "a100", "zone": "z2", "gpu-count": "8"}),
    gpu_node(
        "gpu-h-1",
        labels={"gpu-type": "h100", "zone": "z1"},
        taints=[{"key": "team", "value": "vision", "effect": NO_SCHEDULE}],
    ),
    gpu_node("gpu-a-3", labels={"gpu-type": "a100"}, cordoned=True),
    gpu_node("cpu-1", gpus=0),
    gpu_node("gpu-s-1", gpus=4, labels={"gpu-type": "a100", "gpu-count": "4"}),
]


def _where(gpus: int = 1, **spec: Any) -> tuple[str, ...]:
    return eligible_nodes(spec, gpus, parse_nodes(NODES))


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def test_a_pod_may_run_only_where_the_schedulers_required_rules_allow() -> None:
    # No rule: every untainted, uncordoned node with the GPUs.
    assert _where() == ("gpu-a-1", "gpu-a-2", "gpu-s-1")
    assert _where(gpus=8) == ("gpu-a-1", "gpu-a-2")  # gpu-s-1 has 4
    assert _where(nodeSelector={"gpu-type": "a100", "zone": "z2"}) == ("gpu-a-2",)
    assert _where(nodeSelector={"kubernetes.io/hostname": "gpu-a-1"}) == ("gpu-a-1",)
    assert _where(nodeSelector={"gpu-type": "h100"}) == ()  # tainted, not tolerated
    team = [{"key": "team", "operator": "Equal", "value": "vision", "effect": NO_SCHEDULE}]
    assert _where(nodeSelector={"gpu-type": "h100"}, tolerations=team) == ("gpu-h-1",)
    anything = [{"operator": "Exists"}]
    assert _where(tolerations=anything) == ("gpu-a-1", "gpu-a-2", "gpu-h-1", "gpu-s-1")
    other_team = [{"key": "team", "operator": "Equal", "value": "nlp"}]
    assert "gpu-h-1" not in _where(tolerations=other_team)
    prefer = [{"key": "team", "operator": "Exists", "effect": "PreferNoSchedule"}]
    assert "gpu-h-1" not in _where(tolerations=prefer)  # tolerates another effect only


def test_required_node_affinity_terms_are_ored_and_their_expressions_anded() -> None:
    in_z1 = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
    a100_not_z1 = {
        "matchExpressions": [
            {"key": "gpu-type", "operator": "In", "values": ["a100"]},
            {"key": "zone", "operator": "NotIn", "values": ["z1"]},
        ]
    }
    assert _where(affinity=_required(in_z1)) == ("gpu-a-1",)  # gpu-h-1 tainted
    assert _where(affinity=_required(a100_not_z1)) == ("gpu-a-2", "gpu-s-1")
    assert _where(affinity=_required(in_z1, a100_not_z1)) == ("gpu-a-1", "gpu-a-2", "gpu-s-1")
    no_zone = {"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}
    assert _where(affinity=_required(no_zone)) == ("gpu-s-1",)
    big = {"matchExpressions": [{"key": "gpu-count", "operator": "Gt", "values": ["4"]}]}
    assert _where(affinity=_required(big)) == ("gpu-a-1", "gpu-a-2")
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-a-2"]}]}
    assert _where(affinity=_required(by_name)) == ("gpu-a-2",)
    assert _where(affinity=_required({})) == ()  # an empty term matches no node
    assert _where(affinity=_required()) == ()  # no term: none either


@pytest.mark.parametrize(
    "spec",
    [
        {"affinity": _required({"matchExpressions": [{"key": "k", "operator": "Near"}]})},
        {
            "affinity": _required(
                {"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["x"]}]}
            )
        },
        {"affinity": _required({"matchFields": [{"key": "spec.podCIDR", "operator": "In"}]})},
        {"nodeSelector": ["gpu-type"]},
        {"tolerations": [{"key": "team", "operator": "Maybe"}]},
        {"tolerations": {"key": "team"}},
    ],
)
@pytest.mark.reliability(51)
def test_a_rule_of_a_shape_the_api_does_not_give_is_unknown(spec: dict[str, Any]) -> None:
    with pytest.raises(DemandError):
        _where(**spec)


def test_pending_pods_through_the_api_server(tmp_path: Path) -> None:
    with ApiServer(tmp_path) as server:
        server.nodes = NODES
        server.pending = [
            _pod("train", "2", nodeSelector={"kubernetes.io/hostname": "gpu-a-1"}),
            _pod("cpu-only", None),
            _pod("waiting-for-image", "1", reason="SchedulingGated"),
            _pod("h100-only", "1", nodeSelector={"gpu-type": "h100"}),  # no toleration
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
            claimant=Claimant(pod="ml/train"),  # its hand-off is proven by that pod
        )
        assert ("GET", "/api/v1/pods?fieldSelector=status.phase%3DPending") in server.requests
        assert ("GET", "/api/v1/nodes") in server.requests
        server.pending = [_pod("odd", "two")]
        with pytest.raises(DemandError):
            PendingPods(api).read()
        server.pending = [_pod("train", "1")]
        server.nodes = [{"metadata": {"name": "n"}, "status": {"allocatable": "8 GPUs"}}]
        with pytest.raises(DemandError, match="allocatable"):
            PendingPods(api).read()
        server.pending, before = [], len(server.requests)
        assert PendingPods(api).read().requests == ()
        # Nobody waits: the nodes are not read.
        assert ("GET", "/api/v1/nodes") not in server.requests[before:]
    with pytest.raises(DemandError):  # the API server is gone
        PendingPods(api).read()


def test_a_pod_bound_to_a_node_or_without_gpus_or_anywhere_to_go_is_no_request() -> None:
    nodes = parse_nodes(NODES)
    assert pod_request(_pod("bound", "1", nodeName="gpu-a-1"), nodes) is None
    assert pod_request(_pod("too-big", "16"), nodes) is None  # no node has 16 GPUs
    init = _pod("init", "1")
    init["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    ]
    request = pod_request(init, nodes)
    assert request is not None and request.gpus == 4
    assert request.nodes == ("gpu-a-1", "gpu-a-2", "gpu-s-1")
