"""Container, pod and Slurm job from /proc/<pid>/cgroup, per runtime and cgroup version."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.cgroup import ContainerIdentity, parse_cgroup, read_cgroup_identity

FIXTURES = Path(__file__).parent / "fixtures" / "cgroup"
DOCKER_ID = "3f2c8a1b9e7d4c6f5a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f"
CONTAINERD_ID = "8b1e0c9d2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c"
K8S_ID = "e5f1b2c3d4a5968778695a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d"
PODMAN_ID = "a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"

EXPECTED = {
    "docker_v1.txt": ContainerIdentity(container=DOCKER_ID, runtime="docker"),
    "docker_v2.txt": ContainerIdentity(container=DOCKER_ID, runtime="docker"),
    "containerd_k8s_v2.txt": ContainerIdentity(
        container=CONTAINERD_ID,
        pod="6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b",
        runtime="containerd",
    ),
    "containerd_k8s_v1_cgroupfs.txt": ContainerIdentity(
        container=K8S_ID,
        pod="0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
        runtime="containerd",
    ),
    "containerd_k8s_v1_systemd.txt": ContainerIdentity(
        container=CONTAINERD_ID,
        pod="7c8d9e0f-1a2b-4c3d-9e4f-5a6b7c8d9e0f",
        runtime="containerd",
    ),
    "crio_k8s_v2.txt": ContainerIdentity(
        container=K8S_ID,
        pod="2b3c4d5e-6f70-4a81-9b2c-3d4e5f607182",
        runtime="cri-o",
    ),
    "podman_rootless_v2.txt": ContainerIdentity(container=PODMAN_ID, runtime="podman"),
    "podman_v1_cgroupfs.txt": ContainerIdentity(container=PODMAN_ID, runtime="podman"),
    "slurm_v1.txt": ContainerIdentity(slurm_job="123"),
    "slurm_multi_v1.txt": ContainerIdentity(slurm_job="98765"),
    "slurm_v2.txt": ContainerIdentity(slurm_job="4567"),
    "host_session_v2.txt": ContainerIdentity(),
    "host_service_v1.txt": ContainerIdentity(),
    "container_cgroupns_v2.txt": ContainerIdentity(),
}


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture(name: str) -> None:
    assert parse_cgroup((FIXTURES / name).read_text()) == EXPECTED[name]


def test_namespace_is_never_guessed_from_the_path() -> None:
    # The namespace is not in the cgroup path; only a pod resolver may fill it in.
    identity = parse_cgroup((FIXTURES / "containerd_k8s_v2.txt").read_text())
    assert identity.pod and identity.namespace == ""


def test_conmon_scope_is_not_the_container() -> None:
    text = f"0::/machine.slice/libpod-conmon-{PODMAN_ID}.scope\n"
    assert parse_cgroup(text) == ContainerIdentity()
    text = f"0::/kubepods.slice/crio-conmon-{K8S_ID}.scope\n"
    assert parse_cgroup(text) == ContainerIdentity()


def test_innermost_container_wins_in_docker_in_docker() -> None:
    text = f"0::/system.slice/docker-{DOCKER_ID}.scope/docker/{K8S_ID}\n"
    assert parse_cgroup(text) == ContainerIdentity(container=K8S_ID, runtime="docker")


def test_bare_id_without_known_parent_has_no_runtime() -> None:
    # containerd's own namespaces (ctr/nerdctl with the cgroupfs driver): "/default/<id>".
    assert parse_cgroup(f"0::/default/{K8S_ID}\n") == ContainerIdentity(container=K8S_ID)


def test_slurm_job_inside_a_container_cgroup() -> None:
    text = (
        "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n"
        f"5:memory:/docker/{DOCKER_ID}\n"
    )
    assert parse_cgroup(text) == ContainerIdentity(
        container=DOCKER_ID, runtime="docker", slurm_job="77"
    )


def test_job_outside_slurm_is_not_a_slurm_job() -> None:
    assert parse_cgroup("0::/system.slice/job_12/step_0\n").slurm_job == ""


def test_empty_and_garbage() -> None:
    assert parse_cgroup("") == ContainerIdentity()
    assert parse_cgroup("not a cgroup file\n::\n") == ContainerIdentity()


@given(st.text())
def test_parse_never_raises(text: str) -> None:
    assert isinstance(parse_cgroup(text), ContainerIdentity)


@given(st.lists(st.text(alphabet="0123456789abcdef/:_-.slurmjobpodkube\n", max_size=80)))
def test_parse_never_raises_on_cgroup_like_text(lines: list[str]) -> None:
    assert isinstance(parse_cgroup("\n".join(lines)), ContainerIdentity)


def test_read_own_process() -> None:
    # This process is somewhere; whatever it is, reading must work and agree with parsing.
    expected = parse_cgroup(Path(f"/proc/{os.getpid()}/cgroup").read_text())
    assert read_cgroup_identity(os.getpid()) == expected


def test_read_from_fixture_proc_root(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text((FIXTURES / "crio_k8s_v2.txt").read_text())
    assert read_cgroup_identity(4242, proc_root=tmp_path) == EXPECTED["crio_k8s_v2.txt"]


def test_read_vanished_process(tmp_path: Path) -> None:
    assert read_cgroup_identity(4242, proc_root=tmp_path) == ContainerIdentity()
