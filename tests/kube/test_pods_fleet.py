"""A pod on another node, through that node's agent: the agent names the pod (its kubelet's
pod-resources API), the central actuator proves it with the API server and evicts it; no
PID is signalled. Kubelet and API server are the STAND-INS of tests/helpers/kube.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.actuator import Actuator, Workloads, alert_for, payload
from tests.helpers.fleet import Agent, client_tls, make_certs, make_node
from tests.helpers.kube import ApiServer, Kubelet, PodCgroup, PodSpec, pod_cgroup

pytestmark = pytest.mark.timeout(120)
NODE = "gpu-a"


@pytest.fixture
def cgroup() -> Iterator[PodCgroup]:
    made = pod_cgroup()
    yield made
    made.remove()


def test_the_agent_names_the_pod_and_the_actuator_evicts_it(
    tmp_path: Path, cgroup: PodCgroup
) -> None:
    certs = make_certs(tmp_path / "certs", [NODE])
    sim = make_node(tmp_path / NODE)
    workloads = Workloads(sim)
    with Kubelet(tmp_path / "kubelet.sock") as kubelet, ApiServer(tmp_path) as api:
        pod = PodSpec("research", "train-0", "main", [workloads.uuid(0)], NODE, cgroup)
        kubelet.pods.append(pod)
        api.add_pod(pod)
        agent = Agent(
            NODE,
            sim,
            certs,
            tmp_path,
            node_settings={"pod_resources_socket": str(kubelet.socket_path)},
        )
        agent.start()
        policy = {
            "node": {"name": "central"},
            "agents": {"tls": client_tls(certs), "static": {NODE: agent.url}, "timeout": "2s"},
            "kubernetes": {"kubeconfig": str(api.kubeconfig()), "timeout": "3s", "policies": False},
        }
        actuator = Actuator(tmp_path / "actuator", tmp_path / "unused", policy).start()
        try:
            w = workloads.spawn(memory="1GiB", cgroup=cgroup.path)
            assert actuator.post(payload(alert_for(w, node=NODE))).status_code == 200
            case = actuator.wait_state(w, "reclaimed", "refused", "failed", "cancelled", timeout=40)
            assert case["state"] == "reclaimed", case
            assert [s["signal"] for s in case["signals"]] == ["EVICT"]
            assert [e["dry_run"] for e in pod.evictions] == [True, False]
            live = [t["evidence"]["live"] for t in case["timeline"] if "live" in t["evidence"]]
            assert (live[-1]["pod"], live[-1]["pod_uid"]) == ("train-0", cgroup.uid)
            audit = (tmp_path / "actuator" / "audit.jsonl").read_text().splitlines()
            events = [json.loads(line) for line in audit]
            assert not [e for e in events if e.get("event") == "signals"]  # no PID signalled
        finally:
            actuator.stop()
            agent.kill()
            workloads.cleanup()
