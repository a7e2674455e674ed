"""deploy/kubernetes validated offline: core kinds against Kubernetes' own schemas
(kubernetes-validate, strict), the custom resources against their CRDs' OpenAPI schemas
(ours; prometheus-operator's published PrometheusRule and ServiceMonitor CRDs, in
tests/kube/schemas/), the embedded settings against the project's own models, and the
PrometheusRule against the rule files it is generated from."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from actuator.config import ActuatorConfig
from actuator.fleet.agent_config import AgentConfig
from actuator.schedulers.kube_policies import GROUP, KIND, PLURAL, VERSION, PolicySpec
from exporter.config import ExporterConfig
from exporter.units import parse_duration
from tests.helpers.crd import crd_schema

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
K8S_VERSION = "1.30.0"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kustomization() -> dict[str, Any]:
    return yaml.safe_load((KUBE / "kustomization.yaml").read_text())


def _resources() -> list[dict[str, Any]]:
    return [doc for name in _kustomization()["resources"] for doc in _docs(KUBE / name)]


CUSTOM = {
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.yaml",
}


def _validate_custom(doc: dict[str, Any]) -> None:
    key = (doc["apiVersion"], doc["kind"])
    if key == (f"{GROUP}/{VERSION}", KIND):
        (crd,) = _docs(KUBE / "crd-gpureclaimpolicy.yaml")
    else:
        (crd,) = _docs(SCHEMAS / CUSTOM[key])
    jsonschema.validate(doc, crd_schema(crd, doc["apiVersion"].split("/")[1]))


def test_every_resource_validates_against_its_schema() -> None:
    kinds = set()
    for doc in _resources():
        kinds.add(doc["kind"])
        if (doc["apiVersion"], doc["kind"]) in CUSTOM:
            _validate_custom(doc)
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert kinds >= {
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
        "StatefulSet",
        "Service",
        "PodDisruptionBudget",
        "ServiceMonitor",
        "PrometheusRule",
    }


def test_the_validators_catch_a_broken_manifest() -> None:
    """The checks above can fail: a typo'd field and a bad enum value are reported."""
    (daemonset,) = [d for d in _resources() if d["kind"] == "DaemonSet"]
    broken = {**daemonset, "spec": {**daemonset["spec"], "selecter": {}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
    bad = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": "x", "namespace": "y"},
        "spec": {"action": "nuke"},
    }
    with pytest.raises(jsonschema.ValidationError):
        _validate_custom(bad)
    (rule,) = [d for d in _resources() if d["kind"] == "PrometheusRule"]
    rule = {**rule, "spec": {"groups": [{"rules": []}]}}  # a group needs a name
    with pytest.raises(jsonschema.ValidationError):
        _validate_custom(rule)


def test_the_example_policies_validate_and_the_actuator_reads_them() -> None:
    examples = _docs(KUBE / "examples" / "gpureclaimpolicy.yaml")
    assert examples
    for doc in examples:
        _validate_custom(doc)
        PolicySpec.model_validate(doc["spec"])


def test_the_crd_schema_says_what_the_actuator_reads() -> None:
    (crd,) = _docs(KUBE / "crd-gpureclaimpolicy.yaml")
    assert crd["spec"]["names"]["plural"] == PLURAL and crd["spec"]["group"] == GROUP
    spec = crd_schema(crd, VERSION)["properties"]["spec"]
    fields = {f.alias or name for name, f in PolicySpec.model_fields.items()}
    assert set(spec["properties"]) == fields
    assert spec["properties"]["action"]["enum"] == ["evict", "delete", "signal"]
    # Every duration the schema admits is one the actuator parses.
    pattern = spec["properties"]["grace"]["pattern"]
    for text in ("30s", "1h30m", "1.5s", "500ms", "2d"):
        assert jsonschema.Draft7Validator({"pattern": pattern}).is_valid(text)
        parse_duration(text)
    assert not jsonschema.Draft7Validator({"pattern": pattern}).is_valid("soon")


def test_the_settings_in_the_config_maps_load() -> None:
    maps = {d["metadata"]["name"]: d["data"] for d in _resources() if d["kind"] == "ConfigMap"}
    node, actuator = maps["gpu-reclaimer-node"], maps["gpu-reclaimer-actuator"]
    exporter = ExporterConfig.model_validate(yaml.safe_load(node["exporter.yml"]))
    agent = AgentConfig.model_validate(yaml.safe_load(node["agent.yml"]))
    config = ActuatorConfig.model_validate(yaml.safe_load(actuator["actuator.yml"]))
    assert config.kubernetes is not None and config.kubernetes.kubeconfig is None  # in-cluster
    assert config.storage.database.startswith("postgresql://")
    assert config.agents is not None and config.agents.prometheus is not None
    # The exporters' job as the rules and the agent discovery select it.
    services = {d["metadata"]["name"]: d for d in _resources() if d["kind"] == "Service"}
    service = services["gpu-exporter"]
    assert config.agents.prometheus.job == service["metadata"]["name"]
    socket = "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert str(exporter.pod_resources_socket) == socket == agent.node.pod_resources_socket
    (daemonset,) = [d for d in _resources() if d["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostPID"] and pod["hostNetwork"]
    mounts = {c["name"]: {m["mountPath"] for m in c["volumeMounts"]} for c in pod["containers"]}
    assert all("/var/lib/kubelet/pod-resources" in m for m in mounts.values())
    assert agent.node.heartbeat_dir in mounts["agent"] and agent.tls is not None


def test_rbac_is_least_privilege() -> None:
    (role,) = [d for d in _resources() if d["kind"] == "ClusterRole"]
    granted = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert granted == {
        ("", "pods", "get"),
        ("", "pods", "delete"),
        ("", "pods/eviction", "create"),
        (GROUP, PLURAL, "get"),
        (GROUP, PLURAL, "list"),
        (GROUP, PLURAL, "watch"),
        (GROUP, f"{PLURAL}/status", "patch"),
    }
    accounts = {d["metadata"]["name"]: d for d in _resources() if d["kind"] == "ServiceAccount"}
    assert accounts["gpu-reclaimer-node"]["automountServiceAccountToken"] is False


def test_the_demand_role_only_lists_pods_and_nodes_and_is_not_applied_by_default() -> None:
    """demand.kubernetes lists the Pending pods and the nodes: a role of its own, for the
    actuator's account, that the shipped kustomization (idle only) leaves out."""
    docs = _docs(KUBE / "rbac-demand.yaml")
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    granted = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert granted == {("", "pods", "list"), ("", "nodes", "list")}
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert [s["name"] for s in binding["subjects"]] == ["gpu-reclaimer-actuator"]
    assert "rbac-demand.yaml" not in _kustomization()["resources"]


def test_the_prometheus_rule_is_generated_from_the_rule_files() -> None:
    spec = importlib.util.spec_from_file_location("gen", KUBE / "generate_prometheusrule.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert (KUBE / "prometheusrule.yaml").read_text() == generator.render()
    (rule,) = _docs(KUBE / "prometheusrule.yaml")
    files = [yaml.safe_load((ROOT / "alert-rules" / n).read_text()) for n in generator.RULE_FILES]
    assert rule["spec"]["groups"] == [g for f in files for g in f["groups"]]
