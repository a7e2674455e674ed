"""Which pod a GPU process belongs to: a real process in a real pod cgroup, the kubelet's
pod-resources API (the gRPC stand-in, tests/helpers/kube.py) and the real exporter."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from exporter.sim.state import init_node, load_node, read_procs
from tests.helpers.kube import Kubelet, PodCgroup, PodSpec, pod_cgroup
from tests.support import free_port, gpu_reclaimer_command, wait_until

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def cgroups() -> Iterator[list[PodCgroup]]:
    made: list[PodCgroup] = []
    yield made
    for c in made:
        c.remove()


def _in_pod(sim: Path, gpu: int, cgroup: PodCgroup) -> subprocess.Popen[bytes]:
    """A simulated GPU workload that joins the pod's cgroup before it starts, as a
    container's process is born in it."""
    run = (
        f"{sys.executable} -m exporter.cli sim run --dir {sim} --gpu {gpu} --memory 1GiB "
        f"--phases idle --tick 0.2"
    )
    return subprocess.Popen(
        ["sh", "-c", f"echo $$ > {cgroup.path}/cgroup.procs && exec {run}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _info(url: str) -> dict[str, dict[str, str]]:
    text = requests.get(url + "/metrics", timeout=5).text
    return {
        s.labels["pid"]: s.labels
        for f in text_string_to_metric_families(text)
        if f.name == "gpu_process_info"
        for s in f.samples
    }


def test_the_exporter_names_each_pod_process_pod_and_namespace(
    tmp_path: Path, cgroups: list[PodCgroup]
) -> None:
    sim = tmp_path / "node"
    init_node(sim, gpus=3, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    uuids = [g.uuid for g in load_node(sim).gpus]
    train, shared_a = pod_cgroup(), pod_cgroup()
    cgroups.extend([train, shared_a])
    with Kubelet(tmp_path / "kubelet.sock") as kubelet:
        kubelet.pods = [
            # time-slicing replica ids name the GPU they slice
            PodSpec("nlp-train", "bert-0", "trainer", [f"{uuids[0]}::0"], "node-1", train),
            PodSpec("team-a", "shared-a", "main", [f"{uuids[1]}::0"], "node-1", shared_a),
            PodSpec("team-b", "shared-b", "main", [f"{uuids[1]}::1"], "node-1"),
        ]
        procs = [_in_pod(sim, 0, train), _in_pod(sim, 1, shared_a)]
        bare = subprocess.Popen(
            [
                *gpu_reclaimer_command(),
                "sim",
                "run",
                "--dir",
                str(sim),
                "--gpu",
                "2",
                "--memory",
                "1GiB",
                "--phases",
                "idle",
                "--tick",
                "0.2",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(bare)
        port = free_port()
        exporter = subprocess.Popen(
            [
                *gpu_reclaimer_command(),
                "exporter",
                "--sim-dir",
                str(sim),
                "--listen",
                f"127.0.0.1:{port}",
                "--node-name",
                "node-1",
                "--heartbeat-dir",
                str(tmp_path),
                "--pod-resources-socket",
                str(kubelet.socket_path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: len(read_procs(sim)) == 3, 30)
            url = f"http://127.0.0.1:{port}"
            info = wait_until(lambda: (i := _info(url)) and len(i) == 3 and i, 30)
            pod_pid, shared_pid = str(procs[0].pid), str(procs[1].pid)
            assert (info[pod_pid]["namespace"], info[pod_pid]["pod"]) == ("nlp-train", "bert-0")
            assert info[pod_pid]["pod_uid"] == train.uid
            assert info[pod_pid]["container"] == train.container_id
            # Two pods slice GPU 1: the process is in a pod, but which one is not guessed.
            assert info[shared_pid]["pod_uid"] == shared_a.uid
            assert (info[shared_pid]["namespace"], info[shared_pid]["pod"]) == ("", "")
            # Not in a pod at all: no pod labels, whatever the kubelet says of GPU 2.
            labels = info[str(bare.pid)]
            assert (labels["pod"], labels["pod_uid"], labels["namespace"]) == ("", "", "")
        finally:
            exporter.terminate()
            exporter.wait(10)
            for p in procs:
                p.kill()
                p.wait(10)
