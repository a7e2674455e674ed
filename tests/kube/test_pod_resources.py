"""The kubelet's pod-resources client (exporter/kube/pod_resources.py) against the gRPC
stand-in (tests/helpers/kube.py): a GPU one pod holds names that pod; a GPU several pods
share (time-slicing), a device of another resource, or a kubelet that fails names none."""

from __future__ import annotations

from pathlib import Path

from exporter.kube.pod_resources import PodRef, PodResources, device_key
from tests.helpers.kube import Kubelet, PodSpec


def test_the_client_answers_unknown_when_the_kubelet_fails(tmp_path: Path) -> None:
    with Kubelet(tmp_path / "kubelet.sock") as kubelet:
        kubelet.pods = [PodSpec("ns", "p", "c", ["GPU-a"], "n")]
        client = PodResources(kubelet.socket_path, refresh=60)
        assert client.locate("GPU-a") == PodRef("ns", "p", "c")
        assert client.locate("GPU-b") is None
        kubelet.failing = True
        assert client.locate("GPU-a") == PodRef("ns", "p", "c")  # within `refresh`: cached
        assert client.locate("GPU-a", max_age=0) is None  # asked afresh: unknown
        assert "UNAVAILABLE" in client.last_error
        client.close()
    assert PodResources(tmp_path / "absent.sock", timeout=0.5).locate("GPU-a") is None


def test_a_gpu_that_pods_share_names_no_pod(tmp_path: Path) -> None:
    """Time-slicing hands replicas `GPU-x::N` of one GPU to several pods: which of them a
    process belongs to cannot be told from the allocation, so none is named."""
    with Kubelet(tmp_path / "kubelet.sock") as kubelet:
        kubelet.pods = [
            PodSpec("team-a", "train", "main", ["GPU-x::0"], "n"),
            PodSpec("team-b", "notebook", "main", ["GPU-x::1"], "n"),
            PodSpec("team-a", "solo", "main", ["GPU-y::0", "GPU-y::1"], "n"),
        ]
        client = PodResources(kubelet.socket_path)
        assert client.locate("GPU-x") is None
        assert client.locate("GPU-y") == PodRef("team-a", "solo", "main")  # two replicas, one pod
        table = client.holders()
        assert table is not None and {r.name for r in table["GPU-x"]} == {"train", "notebook"}
        client.close()


def test_only_the_gpu_resources_count_and_the_list_is_reused(tmp_path: Path) -> None:
    now = [0.0]
    with Kubelet(tmp_path / "kubelet.sock") as kubelet:
        kubelet.pods = [PodSpec("ns", "p", "c", ["GPU-a"], "n")]
        other = PodResources(kubelet.socket_path, resource_prefixes=("example.com/",))
        assert other.locate("GPU-a") is None  # a GPU is not an example.com/ device
        other.close()
        client = PodResources(kubelet.socket_path, refresh=10, clock=lambda: now[0])
        calls = kubelet.calls
        for _ in range(5):
            assert client.locate("GPU-a") == PodRef("ns", "p", "c")
        assert kubelet.calls == calls + 1  # one List per refresh period
        now[0] = 10.0
        client.locate("GPU-a")
        assert kubelet.calls == calls + 2
        client.close()


def test_device_ids_name_their_gpu() -> None:
    assert device_key("GPU-6248c547-aaaa") == "GPU-6248c547-aaaa"
    assert device_key("GPU-6248c547-aaaa::3") == "GPU-6248c547-aaaa"
    assert device_key("MIG-1f2e") == "MIG-1f2e"
