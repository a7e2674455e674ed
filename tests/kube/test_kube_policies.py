"""GpuReclaimPolicy objects as policy rules, and their list/watch against the API server
STAND-IN (tests/helpers/kube.py) with the official client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actuator.policy import Facts, Match, Mode, Policy, ProjectRule, resolve
from actuator.schedulers.kube_api import KubeApi
from actuator.schedulers.kube_policies import NamespacePolicies, PolicyObjects, PolicyWatch
from tests.helpers.kube import ApiServer
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


def _obj(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": spec}


def test_a_namespace_rule_comes_after_the_files_and_never_exceeds_its_mode() -> None:
    base = Policy(
        mode=Mode.NOTIFY,
        projects=(
            ProjectRule(name="inference", match=Match(namespaces=("serving",)), protected=True),
        ),
    )
    objects = PolicyObjects()
    objects.replace(
        [
            _obj("serving", "open-up", {"protected": False, "mode": "enforce"}),
            _obj("research", "b-later", {"grace": "1h"}),
            _obj(
                "research",
                "a-first",
                {"mode": "enforce", "idleFor": "30m", "grace": "5m", "action": "delete"},
            ),
        ]
    )
    policies = NamespacePolicies(objects, "evict")
    policy = policies.policy(base)
    # The file's rule for `serving` wins: a namespace cannot lift its protection.
    served = resolve(policy, Facts(namespace="serving"))
    assert served.protected and served.rule == "projects #1 (inference)"
    research = resolve(policy, Facts(namespace="research"))
    assert research.rule == "projects #2 (GpuReclaimPolicy research/a-first)"
    assert (research.idle_for, research.grace) == (1800.0, 300.0)
    assert research.mode == Mode.NOTIFY  # asked for enforce; the cluster's mode is notify
    assert policies.action_for("research") == "delete"
    assert policies.action_for("elsewhere") == "evict"
    # An alert's namespace label is a claim: it selects no namespace rule.
    assert resolve(policy, Facts()).rule == "defaults"


def test_an_invalid_object_is_skipped_and_changes_nothing() -> None:
    objects = PolicyObjects()
    objects.replace([_obj("lab", "ok", {"grace": "10m"})])
    before = objects.revision
    objects.apply("MODIFIED", _obj("lab", "ok", {"grace": "soon"}))
    objects.apply("ADDED", _obj("lab", "typo", {"gracee": "1m"}))
    objects.apply("ADDED", {"spec": {}})
    spec = objects.spec_for("lab")
    assert spec is not None and spec.grace == 600.0
    # A bad MODIFIED leaves the object it would replace in force.
    assert objects.revision == before
    objects.apply("DELETED", _obj("lab", "ok", {}))
    assert objects.spec_for("lab") is None


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    with ApiServer(tmp_path) as server:
        yield server


def test_the_watch_follows_the_api_server_and_resyncs_after_an_outage(api: ApiServer) -> None:
    api.put_policy("lab", "p", {"grace": "1m"})
    client = KubeApi.connect(str(api.kubeconfig()))
    objects = PolicyObjects()
    watch = PolicyWatch(client.api_client, objects, timeout=2, watch_seconds=2, backoff=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=watch.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: (s := objects.spec_for("lab")) is not None and s.grace == 60.0, 10)
        api.put_policy("lab", "p", {"grace": "2m"})
        wait_until(lambda: objects.spec_for("lab").grace == 120.0, 10)  # type: ignore[union-attr]
        api.put_policy("ml", "q", {"protected": True})
        wait_until(lambda: objects.spec_for("ml") is not None, 10)
        api.delete_policy("lab", "p")
        wait_until(lambda: objects.spec_for("lab") is None, 10)
        # Events lost (an outage, a compaction): the watch gets 410 Gone and lists again.
        lists = sum(1 for _, p in api.requests if "watch=" not in p)
        api.put_policy("ml", "q", {"grace": "7m"}, silently=True)
        api.compact()
        wait_until(lambda: objects.spec_for("ml").grace == 420.0, 15)  # type: ignore[union-attr]
        assert sum(1 for _, p in api.requests if "watch=" not in p) > lists
        watches = [p for m, p in api.requests if "watch=" in p]
        assert watches and all("resourceVersion=" in p for p in watches)
    finally:
        stop.set()
        thread.join(10)


def test_each_object_s_status_says_whether_it_is_in_force(api: ApiServer) -> None:
    import jsonschema
    import yaml

    from tests.helpers.crd import KUBE, crd_schema

    api.put_policy("lab", "a-main", {"mode": "enforce", "grace": "1h"})
    api.put_policy("lab", "b-extra", {"grace": "1m"})
    api.put_policy("ml", "typo", {"gracee": "1m"})  # past the CRD's schema (an old CRD)
    client = KubeApi.connect(str(api.kubeconfig()))
    objects = PolicyObjects()
    watch = PolicyWatch(
        client.api_client,
        objects,
        timeout=2,
        watch_seconds=2,
        backoff=0.2,
        cluster_mode=Mode.NOTIFY,
    )
    stop = threading.Event()
    thread = threading.Thread(target=watch.run, args=(stop,), daemon=True)
    thread.start()

    def accepted(ns: str, name: str) -> dict[str, Any] | None:
        status = api.policies[(ns, name)].get("status") or {}
        return next((c for c in status.get("conditions", []) if c["type"] == "Accepted"), None)

    try:
        wait_until(lambda: all(accepted(*k) for k in api.policies), 10)
        main, extra, typo = (
            accepted("lab", "a-main"),
            accepted("lab", "b-extra"),
            accepted("ml", "typo"),
        )
        assert main is not None and extra is not None and typo is not None
        assert (main["status"], main["reason"]) == ("True", "InForce")
        assert "mode enforce capped at the cluster's notify" in main["message"]
        assert (extra["status"], extra["reason"]) == ("False", "Shadowed")
        assert "GpuReclaimPolicy lab/a-main applies" in extra["message"]
        assert (typo["status"], typo["reason"]) == ("False", "Invalid")
        assert "gracee" in typo["message"]
        (crd,) = yaml.safe_load_all((KUBE / "crd-gpureclaimpolicy.yaml").read_text())
        schema = crd_schema(crd, "v1alpha1")["properties"]["status"]
        for obj in api.policies.values():
            jsonschema.validate(obj["status"], schema)
            assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        # Written once: the MODIFIED events of its own patches change nothing more.
        settled = len(api.status_patches)
        time.sleep(1.0)
        assert len(api.status_patches) == settled == 3
        # Deleting the first uncovers the second: it is now the one in force.
        api.delete_policy("lab", "a-main")
        wait_until(lambda: (c := accepted("lab", "b-extra")) and c["reason"] == "InForce", 10)
        # Re-created under the same name (another UID, generation 1 again): written anew.
        api.put_policy("lab", "a-main", {"mode": "enforce", "grace": "1h"})
        wait_until(lambda: (c := accepted("lab", "a-main")) and c["reason"] == "InForce", 10)
        wait_until(lambda: (c := accepted("lab", "b-extra")) and c["reason"] == "Shadowed", 10)
    finally:
        stop.set()
        thread.join(10)
