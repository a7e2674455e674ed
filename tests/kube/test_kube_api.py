"""The actuator's hands on Kubernetes (actuator/schedulers/kube_api.py) against the API
server stand-in (tests/helpers/kube.py, over TLS with a bearer token): a pod read as the
API server has it, an eviction and a deletion that only ever remove the pod with the UID
that was judged, a disruption budget's refusal in its own words, and an API server that
cannot be asked as KubeError (unknown), never as a pod that is gone."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from actuator.schedulers.kube_api import EvictionBlocked, KubeApi, KubeError
from tests.helpers.kube import ApiServer, PodSpec

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    with ApiServer(tmp_path) as server:
        yield server


@pytest.fixture
def client(api: ApiServer) -> KubeApi:
    return KubeApi.connect(str(api.kubeconfig()), timeout=5)


def _serving(api: ApiServer, **over: object) -> PodSpec:
    spec = PodSpec("lab", "serving", "main", ["GPU-a"], "gpu-01", **over)  # type: ignore[arg-type]
    api.add_pod(spec)
    return spec


def test_a_pod_is_read_as_the_api_server_has_it(api: ApiServer, client: KubeApi) -> None:
    spec = _serving(api, annotations={"gpu-reclaimer.io/owner": "alice"})
    pod = client.pod("lab", "serving")
    assert pod is not None
    assert (pod.namespace, pod.name, pod.uid, pod.node) == ("lab", "serving", spec.uid, "gpu-01")
    assert (pod.phase, pod.terminating) == ("Running", False)
    assert pod.annotations == {"gpu-reclaimer.io/owner": "alice"}
    assert pod.ref == {"namespace": "lab", "name": "serving", "uid": spec.uid}
    assert client.pod("lab", "absent") is None


def test_an_eviction_removes_only_the_pod_that_was_judged(api: ApiServer, client: KubeApi) -> None:
    spec = _serving(api)
    pod = client.pod("lab", "serving")
    assert pod is not None
    client.evict(pod, dry_run=True)  # asked first: nothing happens
    assert spec.evictions == [{"dry_run": True, "uid": spec.uid}] and not spec.deleted_at
    # Re-created under the same name: the pod judged earlier is not this one.
    with pytest.raises(KubeError, match="Precondition failed"):
        client.evict(replace(pod, uid="another-uid"))
    with pytest.raises(KubeError, match="Precondition failed"):
        client.delete(replace(pod, uid="another-uid"), grace_seconds=0)
    assert not spec.deleted_at
    client.evict(pod)
    assert spec.evictions[-1] == {"dry_run": False, "uid": spec.uid} and spec.deleted_at
    refreshed = client.pod("lab", "serving")
    assert refreshed is not None and refreshed.terminating
    client.delete(pod, grace_seconds=0)  # ends a termination under way
    assert spec.deletions == [{"grace": 0, "uid": spec.uid}]


def test_a_disruption_budget_refuses_in_its_own_words(api: ApiServer, client: KubeApi) -> None:
    _serving(api, pdb_blocks=True)
    pod = client.pod("lab", "serving")
    assert pod is not None
    with pytest.raises(EvictionBlocked) as blocked:
        client.evict(pod)
    assert "would violate the pod's disruption budget" in str(blocked.value)
    assert "serving-pdb needs 1 healthy pods" in str(blocked.value)  # the cause, too


def test_a_pod_gone_before_the_eviction_is_named(api: ApiServer, client: KubeApi) -> None:
    _serving(api)
    pod = client.pod("lab", "serving")
    assert pod is not None
    api.pods.clear()
    with pytest.raises(KubeError, match="pod lab/serving is gone"):
        client.evict(pod)
    with pytest.raises(KubeError, match="pod lab/serving is gone"):
        client.delete(pod)


def test_an_api_server_that_cannot_be_asked_is_unknown(api: ApiServer, tmp_path: Path) -> None:
    wrong_token = api.kubeconfig().read_text().replace("token: ", "token: not-")
    (tmp_path / "wrong").write_text(wrong_token)
    refused = KubeApi.connect(str(tmp_path / "wrong"), timeout=5)
    with pytest.raises(KubeError, match="HTTP 401"):
        refused.pod("lab", "serving")  # not "no such pod"
    api.__exit__()
    gone = KubeApi.connect(str(api.kubeconfig()), timeout=2)
    with pytest.raises(KubeError, match="did not answer"):
        gone.pod("lab", "serving")
    with pytest.raises(KubeError, match="did not answer"):
        gone.pending_pods()


@pytest.mark.parametrize(
    "answer",
    [
        b"<html><body>Sign in to the cluster proxy</body></html>",
        b'["a", "list"]',
        b'{"metadata": "lab/serving"}',
        b'{"metadata": {"name": "serving", "uid": 7}}',
        b'{"metadata": {"name": "serving", "annotations": {"gpu-reclaimer.io/keep": 2}}}',
        b'{"metadata": {"name": "serving"}, "spec": {"nodeName": ["gpu-01"]}}',
    ],
)
def test_an_answer_of_another_shape_is_an_api_server_that_cannot_be_asked(
    api: ApiServer, client: KubeApi, answer: bytes
) -> None:
    """A proxy in front of the API server that answers 200 with a sign-in page, or an
    answer with a number where text belongs: KubeError (the step waits, nothing is
    signalled), never a pod with empty or foreign fields."""
    _serving(api)
    api.broken["/api/v1/namespaces/lab/pods/serving"] = answer
    with pytest.raises(KubeError, match="the API server's answer"):
        client.pod("lab", "serving")
    api.broken.clear()
    pod = client.pod("lab", "serving")
    assert pod is not None and pod.name == "serving"
