"""Where a pending pod could run: the nodes the scheduler's hard rules allow for it.

A pod waits for GPUs on the nodes it may use, not on every node: one that selects
`gpu-type: a100` is not served by a reclaim on an H100 node. The rules applied are the
scheduler's required ones, read from the API server's node list:

- the node has at least the pod's `nvidia.com/gpu` as allocatable;
- the node is not cordoned (`spec.unschedulable`);
- `spec.nodeSelector`: every label equal;
- `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`: any one of
  its `nodeSelectorTerms`, each term every one of its `matchExpressions` (In, NotIn,
  Exists, DoesNotExist, Gt, Lt on labels) and `matchFields` (In, NotIn on
  `metadata.name`);
- every `NoSchedule` or `NoExecute` taint of the node tolerated by the pod.

Preferences (preferred affinity, `PreferNoSchedule`) do not bind a pod and are not read.
What the scheduler decides beyond these (pod affinity, topology spread, other resources) is
not read either: a node these rules allow may still not take the pod, so a reclaim there
can be needless, and the hand-off check reports it. A rule of a shape the API does not
give is a DemandError: the whole reading is unknown, as with any nonsense from a source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actuator.demand.model import DemandError

GPU_RESOURCE = "nvidia.com/gpu"
BINDING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class KubeNode:
    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    gpus: int  # allocatable nvidia.com/gpu


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DemandError(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DemandError(f"{what} is not a list")
    return value


def _whole(value: Any, what: str) -> int:
    text = str(value)
    if not text.isdecimal():
        raise DemandError(f"{what} {text[:40]!r} is not a whole number")
    return int(text)


def parse_nodes(items: Any) -> list[KubeNode]:
    """The API server's node list items as KubeNodes (DemandError: not a node list)."""
    nodes = []
    for item in _list(items, "the node list"):
        item = _mapping(item, "a node")
        meta = _mapping(item.get("metadata"), "a node's metadata")
        spec = _mapping(item.get("spec"), "a node's spec")
        status = _mapping(item.get("status"), "a node's status")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise DemandError("a node without a name")
        labels = _mapping(meta.get("labels"), f"node {name}'s labels")
        taints = []
        for raw in _list(spec.get("taints"), f"node {name}'s taints"):
            raw = _mapping(raw, f"a taint of node {name}")
            taints.append(
                Taint(
                    str(raw.get("key") or ""), str(raw.get("value") or ""), str(raw.get("effect"))
                )
            )
        allocatable = _mapping(status.get("allocatable"), f"node {name}'s allocatable")
        gpus = allocatable.get(GPU_RESOURCE)
        nodes.append(
            KubeNode(
                name=name,
                labels={str(k): str(v) for k, v in labels.items()},
                taints=tuple(taints),
                unschedulable=spec.get("unschedulable") is True,
                gpus=0 if gpus is None else _whole(gpus, f"node {name}'s {GPU_RESOURCE}"),
            )
        )
    return nodes


def _expression_holds(expression: Any, values_of: dict[str, str], what: str) -> bool:
    expression = _mapping(expression, what)
    key, operator = expression.get("key"), expression.get("operator")
    values = [str(v) for v in _list(expression.get("values"), f"{what}'s values")]
    present = key in values_of
    value = values_of.get(str(key), "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise DemandError(f"{what}: {operator} takes one value")
        bound = _integer(values[0], what)
        if not present:
            return False
        try:
            number = int(value)
        except ValueError:
            return False  # a label that is not a number is neither greater nor less
        return number > bound if operator == "Gt" else number < bound
    raise DemandError(f"{what}: operator {str(operator)[:20]!r} is not one the API has")


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise DemandError(f"{what}: {text[:20]!r} is not an integer") from None


def _term_holds(term: Any, node: KubeNode) -> bool:
    term = _mapping(term, "a node selector term")
    expressions = _list(term.get("matchExpressions"), "matchExpressions")
    fields = _list(term.get("matchFields"), "matchFields")
    if not expressions and not fields:
        return False  # an empty term matches no node
    for field in fields:
        if _mapping(field, "a matchFields entry").get("key") != "metadata.name":
            raise DemandError("matchFields: only metadata.name is a node field")
    return all(
        _expression_holds(e, node.labels, "a matchExpressions entry") for e in expressions
    ) and all(_expression_holds(f, {"metadata.name": node.name}, "matchFields") for f in fields)


def _tolerated(taint: Taint, tolerations: list[Any]) -> bool:
    for raw in tolerations:
        toleration = _mapping(raw, "a toleration")
        effect = toleration.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key, operator = toleration.get("key") or "", toleration.get("operator") or "Equal"
        if operator == "Exists":
            if not key or key == taint.key:
                return True
        elif operator == "Equal":
            if key == taint.key and (toleration.get("value") or "") == taint.value:
                return True
        else:
            raise DemandError(f"a toleration's operator {str(operator)[:20]!r}")
    return False


def may_run_on(spec: dict[str, Any], gpus: int, node: KubeNode) -> bool:
    """Whether the scheduler's required rules allow the pod (`spec`, asking for `gpus`)
    on `node` (DemandError: a rule of a shape the API does not give)."""
    if node.unschedulable or node.gpus < gpus:
        return False
    selector = _mapping(spec.get("nodeSelector"), "nodeSelector")
    if any(node.labels.get(str(k)) != str(v) for k, v in selector.items()):
        return False
    affinity = _mapping(spec.get("affinity"), "affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), "nodeAffinity")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        terms = _list(
            _mapping(required, "required node affinity").get("nodeSelectorTerms"),
            "nodeSelectorTerms",
        )
        if not any(_term_holds(term, node) for term in terms):
            return False
    tolerations = _list(spec.get("tolerations"), "tolerations")
    return all(
        _tolerated(taint, tolerations) for taint in node.taints if taint.effect in BINDING_EFFECTS
    )


def eligible_nodes(spec: dict[str, Any], gpus: int, nodes: list[KubeNode]) -> tuple[str, ...]:
    """The nodes the pod may run on, by name (none: it waits for no GPU a reclaim frees)."""
    return tuple(node.name for node in nodes if may_run_on(spec, gpus, node))
