"""Pods reclaimed through the API server. The actuator is the real one (gunicorn) with the
official Kubernetes client; the kubelet's pod-resources API and the API server are
STAND-INS (tests/helpers/kube.py) speaking their published protocols; each pod is a real
process in a real pod cgroup, stopped by the stand-in kubelet as a real one would."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.helpers.actuator import NODE, Actuator, Workload, Workloads, alert_for, payload
from tests.helpers.kube import ApiServer, Kubelet, PodCgroup, PodSpec, gpu_node, pod_cgroup
from tests.helpers.mail import Inbox
from tests.support import free_port, wait_until

pytestmark = pytest.mark.timeout(120)


@dataclass
class Site:
    kubelet: Kubelet
    api: ApiServer
    actuator: Actuator
    workloads: Workloads
    cgroups: list[PodCgroup]
    inbox: Inbox

    def pod(
        self,
        gpu: int,
        namespace: str,
        name: str,
        *,
        shared: bool = False,
        options: tuple[str, ...] = (),
        **spec: Any,
    ) -> tuple[Workload, PodSpec]:
        """A pod whose one container runs a simulated GPU workload on `gpu`."""
        cgroup = pod_cgroup()
        self.cgroups.append(cgroup)
        uuid = self.workloads.uuid(gpu)
        pod = PodSpec(namespace, name, "main", [f"{uuid}::0"], NODE, cgroup, **spec)
        self.kubelet.pods.append(pod)
        if shared:  # another pod slices the same GPU
            self.kubelet.pods.append(PodSpec(namespace, f"{name}-b", "main", [f"{uuid}::1"], NODE))
        self.api.add_pod(pod)
        w = self.workloads.spawn(*options, gpu=gpu, memory="1GiB", cgroup=cgroup.path)
        return w, pod

    def policy(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        """A GpuReclaimPolicy, once both actuator workers' watches have seen it."""
        revision = self.api.put_policy(namespace, name, spec)
        wait_until(lambda: self.api.caught_up(revision) >= 2, 20)
        time.sleep(0.3)

    def audit(self, event: str) -> list[dict[str, Any]]:
        lines = (self.actuator.workdir / "audit.jsonl").read_text().splitlines()
        return [r for r in map(json.loads, lines) if r.get("event") == event]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from exporter.sim.state import init_node

    base = tmp_path_factory.mktemp("kube")
    init_node(base / "node", gpus=8, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    workloads = Workloads(base / "node")
    cgroups: list[PodCgroup] = []
    inbox, smtp_port = Inbox(), free_port()
    smtp = Controller(inbox, hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    owners = base / "owners.yml"  # nobody but the SRE route: pods name their owners
    owners.write_text("sre: {name: GPU SRE, email: gpu-sre@example.com}\n")
    with Kubelet(base / "kubelet.sock") as kubelet, ApiServer(base) as api:
        policy = {
            # Owners are told by e-mail; the grace does not wait for it (notice.required
            # is off in these tests, as in tests/actuator).
            "notifier": {
                "directory": str(owners),
                "email": {
                    "host": "127.0.0.1",
                    "port": smtp_port,
                    "security": "none",
                    "sender": "gpu-reclaimer@example.com",
                },
            },
            "node": {"pod_resources_socket": str(kubelet.socket_path)},
            "kubernetes": {"kubeconfig": str(api.kubeconfig()), "timeout": "3s"},
            # Pending pods are demand, for namespaces whose policy says reclaimWhen: demand.
            "demand": {"kubernetes": True, "interval": "0.3s"},
            "projects": [
                {"name": "inference", "match": {"namespaces": ["serving"]}, "protected": True}
            ],
        }
        actuator = Actuator(base / "actuator", base / "node", policy).start()
        try:
            yield Site(kubelet, api, actuator, workloads, cgroups, inbox)
        finally:
            smtp.stop()
            actuator.stop()
            workloads.cleanup()
            for c in cgroups:
                wait_until(lambda c=c: not c.pids(), 10)
                c.remove()


def _final(site: Site, w: Workload, *states: str, timeout: float = 40) -> dict[str, Any]:
    states = states or ("reclaimed", "refused", "cancelled", "failed", "deferred")
    return site.actuator.wait_state(w, *states, timeout=timeout)


def test_an_idle_pod_in_a_reclaimable_namespace_is_evicted_through_the_api(site: Site) -> None:
    w, pod = site.pod(0, "research", "yolo-finetune-0")
    assert site.actuator.post(payload(alert_for(w, namespace="research"))).status_code == 200
    case = _final(site, w)
    assert case["state"] == "reclaimed", case
    # The dry run first (the API server's disruption-budget check), then the eviction; both
    # for this pod's UID only. No PID was signalled by the actuator: the kubelet stopped it.
    assert pod.evictions == [{"dry_run": True, "uid": pod.uid}, {"dry_run": False, "uid": pod.uid}]
    assert [s["signal"] for s in case["signals"]] == ["EVICT"]
    assert not w.alive()
    # The scheduler's view is audited just after the state is committed.
    (verified,) = wait_until(
        lambda: [v for v in site.audit("kube_verified") if v["case"] == case["id"]], 10
    )
    assert verified["state"] == "gone" and verified["pod"]["uid"] == pod.uid
    (step,) = [s for s in site.audit("kube_reclaim") if s["case"] == case["id"]]
    assert step["step"] == "EVICT" and step["ok"]
    live = [t["evidence"]["live"] for t in case["timeline"] if "live" in t["evidence"]][-1]
    assert (live["namespace"], live["pod"], live["pod_uid"]) == (
        "research",
        "yolo-finetune-0",
        pod.uid,
    )


@pytest.mark.reliability(8)
def test_a_pod_in_a_protected_namespace_is_refused(site: Site) -> None:
    w, pod = site.pod(1, "serving", "llm-api-0")
    # The alert's labels claim nothing here: the namespace is the kubelet's word.
    assert site.actuator.post(payload(alert_for(w))).status_code == 200
    case = _final(site, w)
    assert (case["state"], case["reason_code"]) == ("refused", "protected"), case
    assert pod.evictions == [] and pod.deletions == [] and w.alive()


def test_a_disruption_budget_defers_the_eviction_until_it_allows_it(site: Site) -> None:
    w, pod = site.pod(2, "research", "ddp-rank-0", pdb_blocks=True)
    assert site.actuator.post(payload(alert_for(w))).status_code == 200
    case = _final(site, w)
    assert (case["state"], case["reason_code"]) == ("deferred", "pod_blocked"), case
    assert "disruption budget" in case["reason"]
    # Asked again every HOLD_RECHECK (5 s), not every tick (0.1 s here), dry runs only.
    asked = len(pod.evictions)
    time.sleep(2.0)
    assert len(pod.evictions) <= asked + 1
    wait_until(lambda: len(pod.evictions) >= 2, 20)
    assert all(e["dry_run"] for e in pod.evictions) and w.alive() and case["signals"] == []
    pod.pdb_blocks = False
    case = _final(site, w, "reclaimed", "refused", "failed")
    assert case["state"] == "reclaimed", case
    assert [e for e in pod.evictions if not e["dry_run"]] == [{"dry_run": False, "uid": pod.uid}]


@pytest.mark.reliability(26)
def test_a_pod_re_created_under_the_same_name_is_not_evicted(site: Site) -> None:
    # The API server's pod of that name has another UID than the process's cgroup.
    w, pod = site.pod(3, "research", "notebook-0", uid="00000000-0000-4000-8000-000000000000")
    assert site.actuator.post(payload(alert_for(w))).status_code == 200
    case = _final(site, w)
    assert (case["state"], case["reason_code"]) == ("refused", "identity_mismatch"), case
    assert pod.evictions == [] and w.alive()


def test_a_gpu_two_pods_share_is_not_acted_on(site: Site) -> None:
    w, pod = site.pod(4, "research", "sliced", shared=True)
    assert site.actuator.post(payload(alert_for(w, namespace="research"))).status_code == 200
    case = _final(site, w)
    assert (case["state"], case["reason_code"]) == ("refused", "unknown_evidence"), case
    assert "names no single pod" in case["reason"]
    assert pod.evictions == [] and w.alive()


def test_a_namespace_policy_chooses_deletion_for_its_pods(site: Site) -> None:
    site.policy("batch", "reclaim", {"action": "delete", "grace": "0.5s"})
    w, pod = site.pod(5, "batch", "sweep-7")
    assert site.actuator.post(payload(alert_for(w))).status_code == 200
    case = _final(site, w)
    assert case["state"] == "reclaimed", case
    assert case["rule"].startswith("projects #2 (GpuReclaimPolicy batch/reclaim)")
    assert [s["signal"] for s in case["signals"]] == ["DELETE"]
    assert pod.deletions == [{"grace": None, "uid": pod.uid}] and pod.evictions == []


def test_a_namespace_policy_protects_its_namespace(site: Site) -> None:
    site.policy("lab", "keep", {"protected": True})
    w, pod = site.pod(6, "lab", "demo-0")
    assert site.actuator.post(payload(alert_for(w))).status_code == 200
    case = _final(site, w)
    assert (case["state"], case["reason_code"]) == ("refused", "protected"), case
    assert pod.evictions == [] and w.alive()


def test_the_owner_a_pod_names_is_warned_in_its_namespace_language(site: Site) -> None:
    site.policy("vision", "team", {"notice": {"language": "zh-CN"}, "grace": "1s"})
    annotations = {"gpu-reclaimer.io/owner": "lilei@example.com"}
    w, _ = site.pod(7, "vision", "yolo-1", annotations=annotations)
    assert site.actuator.post(payload(alert_for(w, command="yolo"))).status_code == 200
    case = _final(site, w)
    assert case["state"] == "reclaimed", case
    (warning,) = wait_until(
        lambda: [
            m
            for m in site.inbox.messages
            if f"PID {w.pid}" in m["Subject"] and "将于" in m["Subject"]
        ],
        20,
    )
    assert warning["To"] == "lilei@example.com"


def test_a_pod_whose_process_outlives_term_timeout_is_deleted_with_grace_0(site: Site) -> None:
    # Its process ignores SIGTERM and the pod's grace is long: after the actuator's
    # term_timeout (2 s here) the termination under way is ended, by the API, not by PID.
    # GPU 0's first pod was evicted: the kubelet lists it no more.
    w, pod = site.pod(
        0, "research", "stubborn-0", grace_seconds=60.0, options=("--ignore-sigterm",)
    )
    assert site.actuator.post(payload(alert_for(w))).status_code == 200
    case = _final(site, w, "reclaimed", "refused", "failed", "cancelled")
    assert case["state"] == "reclaimed", case
    assert [s["signal"] for s in case["signals"]] == ["EVICT", "DELETE-NOW"]
    assert pod.deletions == [{"grace": 0, "uid": pod.uid}]


def test_observe_mode_rehearses_a_pods_eviction_not_a_pid_signal(site: Site) -> None:
    """A namespace in observe mode: the rehearsal is the step enforcement would take for a
    pod (its eviction, as a dry run), never a PID signal; nothing changes in the cluster."""
    site.policy("rehearsal", "watch", {"mode": "observe"})
    # GPU 5's pod was deleted above: the kubelet lists it no more.
    w, pod = site.pod(5, "rehearsal", "dry-0")
    assert site.actuator.post(payload(alert_for(w))).status_code == 200
    case = _final(site, w, "observed", "reclaimed", "refused", "cancelled", "failed")
    assert case["state"] == "observed", case
    rehearsed = f"case {case['id']}: DRY-RUN: would EVICT"
    log = wait_until(
        lambda: (text := site.actuator.log.read_text()) and rehearsed in text and text, 10
    )
    assert "would evict pod rehearsal/dry-0" in log
    assert f"DRY-RUN: would send SIGTERM to pid {w.pid}" not in log
    assert pod.evictions == [] and pod.deletions == [] and w.alive()
    assert case["signals"] == []


def _pending_pod(name: str, gpus: int) -> dict[str, Any]:
    """A pod the scheduler could not place, as the API server lists it."""
    return {
        "metadata": {"namespace": "training", "name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": "2026-12-02T06:00:00Z",
                }
            ],
        },
    }


def test_an_idle_pod_under_reclaim_when_demand_is_evicted_only_for_a_pending_pod(
    site: Site,
) -> None:
    site.policy("waiting-room", "on-demand", {"reclaimWhen": "demand"})
    # GPU 7's pod was reclaimed above: the kubelet lists it no more.
    w, pod = site.pod(7, "waiting-room", "notebook-0")
    assert site.actuator.post(payload(alert_for(w))).status_code == 200
    case = _final(site, w, "notified", "reclaimed", "refused", "cancelled")
    assert case["state"] == "notified" and "GpuReclaimPolicy waiting-room" in case["rule"], case
    # The warning leaves after the pass has committed the new state, and reads the pod's
    # owner annotation first: count the pod's reads once it is out.
    wait_until(lambda: [a for a in site.audit("notice") if a["case"] == case["id"]], 30, 0.1)
    path = "/api/v1/namespaces/waiting-room/pods/notebook-0"
    reads = sum(1 for m, p in site.api.requests if m == "GET" and p == path)
    time.sleep(2)  # many reads of the (empty) pending list, and many graces: still kept
    assert site.actuator.case_for(w)["state"] == "notified" and pod.evictions == []
    # Steps of a case past pending do not ask the API server for the pod's keep annotation.
    assert sum(1 for m, p in site.api.requests if m == "GET" and p == path) == reads
    # One more node the pod's selector rules out: the pod waits on this node alone.
    site.api.nodes = [gpu_node(NODE), gpu_node("gpu-b-1")]
    site.api.pending = [_pending_pod("resnet-0", 1)]
    try:
        case = _final(site, w)
    finally:
        site.api.pending = []
    assert case["state"] == "reclaimed" and case["demand"]["for"] == "kubernetes:training/resnet-0"
    assert [s["signal"] for s in case["signals"]] == ["EVICT"] and not w.alive()
    # Recorded just after the case's new state (once the eviction is verified): the GPU is
    # free for the pod. No scheduler places the pending pod in this stand-in cluster, so no
    # process of that pod holds the GPU: no hand-off is claimed (it must be proven).
    freed = wait_until(
        lambda: [a for a in site.audit("freed_for_request") if a["case"] == case["id"]], 30, 0.1
    )
    assert [a["who"] for a in freed] == ["pod training/resnet-0"]
    assert not [a for a in site.audit("handed_off") if a["case"] == case["id"]]


def test_a_pod_asks_in_an_annotation_not_to_be_judged_idle_before_its_runtime(
    site: Site,
) -> None:
    """`gpu-reclaimer.io/keep: 2h` on the pod the cgroup proves (the annotation wins over
    the process's environment): kept, as asked, within the rule's bounds (0s to 24h)."""
    # GPU 0's pods were evicted and deleted above: the kubelet lists them no more.
    w, pod = site.pod(0, "research", "eval-0", annotations={"gpu-reclaimer.io/keep": "2h"})
    assert site.actuator.post(payload(alert_for(w))).status_code == 200
    case = _final(site, w, "snoozed", "reclaimed", "refused", "cancelled", "failed")
    assert (case["state"], case["reason_code"]) == ("snoozed", "kept_as_asked"), case
    assert "gpu-reclaimer.io/keep=2h granted (0s to 24h)" in case["reason"]
    assert pod.evictions == [] and w.alive()
