"""Pods as the scheduler of a case (actuator/schedulers/kube_pods.py) against the API server
stand-in: a pod is acted on only once the API server proves it is the pod the node's cgroup
names (same UID, on the case's node); a terminating pod or a disruption budget holds the
case, asked again only after a while; the owner and a keep come from the proven pod's
annotations, nothing from an impostor. The whole reclaim of a real pod: test_pods.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actuator.config import KubernetesSettings
from actuator.models import LiveState, Reason
from actuator.schedulers.kube_api import KubeApi
from actuator.schedulers.kube_pods import HOLD_RECHECK, KubePods
from tests.helpers.cases import make_case, make_live
from tests.helpers.kube import ApiServer, PodSpec

pytestmark = pytest.mark.timeout(60)
NODE = "gpu-01"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    with ApiServer(tmp_path) as server:
        yield server


def _pods(api: ApiServer, now: list[float] | None = None, **settings: object) -> KubePods:
    clock = (lambda: now[0]) if now is not None else (lambda: 0.0)
    client = KubeApi.connect(str(api.kubeconfig()), timeout=5)
    return KubePods(client, KubernetesSettings(**settings), clock=clock)  # type: ignore[arg-type]


def _pod(api: ApiServer, **over: object) -> PodSpec:
    spec = PodSpec("lab", "train", "main", ["GPU-0"], NODE, **over)  # type: ignore[arg-type]
    api.add_pod(spec)
    return spec


def _live(spec: PodSpec, **over: object) -> LiveState:
    fields = {"namespace": spec.namespace, "pod": spec.name, "pod_uid": spec.uid, **over}
    return make_live(**fields)


def test_a_pod_proven_by_uid_and_node_is_ready(api: ApiServer) -> None:
    spec = _pod(api)
    pods = _pods(api)
    assert pods.not_ready(make_case(node=NODE), _live(spec)) is None
    assert spec.evictions == [{"dry_run": True, "uid": spec.uid}]  # the budget, asked first


@pytest.mark.parametrize(
    ("change", "reason", "words"),
    [
        ({"pod": ""}, Reason.UNKNOWN_EVIDENCE, "names no single pod"),
        ({"pod": "other"}, Reason.UNKNOWN_EVIDENCE, "does not know pod lab/other"),
        ({"pod_uid": "another-uid"}, Reason.IDENTITY_MISMATCH, "the process runs in pod UID"),
    ],
)
def test_a_pod_that_is_not_proven_is_never_acted_on(
    api: ApiServer, change: dict[str, str], reason: Reason, words: str
) -> None:
    spec = _pod(api)
    why = _pods(api).not_ready(make_case(node=NODE), _live(spec, **change))
    assert why is not None and why[0] == reason and words in why[1], why
    assert spec.evictions == []


def test_a_pod_on_another_node_is_not_this_case_s(api: ApiServer) -> None:
    spec = _pod(api)
    why = _pods(api).not_ready(make_case(node="gpu-02"), _live(spec))
    assert why is not None and why[0] == Reason.IDENTITY_MISMATCH and "not on gpu-02" in why[1]


def test_a_held_pod_is_asked_about_again_only_after_a_while(api: ApiServer) -> None:
    spec = _pod(api, pdb_blocks=True)
    now = [0.0]
    pods = _pods(api, now)
    case, live = make_case(node=NODE), _live(spec)
    why = pods.not_ready(case, live)
    assert why is not None and why[0] == Reason.POD_BLOCKED and "disruption budget" in why[1]
    asked = len(api.requests)
    now[0] = HOLD_RECHECK - 0.1
    assert pods.not_ready(case, live) == why
    assert len(api.requests) == asked  # not asked again yet
    spec.pdb_blocks = False
    now[0] = HOLD_RECHECK
    assert pods.not_ready(case, live) is None
    assert len(api.requests) > asked


def test_a_terminating_pod_or_a_silent_api_server_holds_the_case(api: ApiServer) -> None:
    spec = _pod(api, deleted_at="2026-12-03T08:00:00Z")
    pods = _pods(api)
    why = pods.not_ready(make_case(node=NODE), _live(spec))
    assert why is not None and why[0] == Reason.POD_BLOCKED and "already terminating" in why[1]
    api.__exit__()
    silent = _pods(api, timeout=1)
    why = silent.not_ready(make_case(id=2, node=NODE), _live(spec))
    assert why is not None and why[0] == Reason.POD_BLOCKED and "cannot be asked" in why[1]


@pytest.mark.parametrize(
    ("annotation", "owner"),
    [
        ("alice", {"user": "alice"}),
        ("li.lei@example.com", {"email": "li.lei@example.com", "language": "en"}),
        ("Robert'); DROP TABLE", None),
        ("", None),
    ],
)
def test_the_owner_comes_from_the_proven_pod(
    api: ApiServer, annotation: str, owner: dict[str, str] | None
) -> None:
    spec = _pod(api, annotations={"gpu-reclaimer.io/owner": annotation})
    pods = _pods(api)
    assert pods.owner(make_case(node=NODE), _live(spec)) == owner
    assert pods.owner(make_case(node=NODE), _live(spec, pod_uid="impostor")) is None


def test_a_keep_comes_from_the_proven_pod_s_annotation(api: ApiServer) -> None:
    spec = _pod(api, annotations={"gpu-reclaimer.io/keep": "4h"})
    pods = _pods(api)
    assert pods.keep_asked(_live(spec)) == "gpu-reclaimer.io/keep=4h"
    assert pods.keep_asked(_live(spec, pod_uid="impostor")) is None
    assert pods.keep_asked(_live(spec, pod="")) is None
