"""Process identity and project mapping (exporter/identity.py)."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from exporter import procfs
from exporter.cgroup import read_cgroup_identity
from exporter.identity import (
    IdentityCache,
    ProcessIdentity,
    ProjectMapping,
    ProjectMappingError,
    ProjectRule,
    command_name,
)
from exporter.kube.pod_resources import PodRef
from tests.support import Children

WAIT = "import sys\nprint('ready', flush=True)\nsys.stdin.readline()\n"
Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn(children: Children) -> Spawn:
    return children.start


def key(pid: int) -> tuple[int, int]:
    ticks = procfs.start_ticks(pid)
    assert ticks is not None
    return pid, ticks


def me() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


# --- command names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python3", "-m", "ipykernel_launcher", "-f", "/r/kernel-1.json"], "ipykernel_launcher"),
        (["/usr/bin/python3", "/usr/local/bin/tensorboard", "--logdir", "x"], "tensorboard"),
        (["/opt/venv/bin/yolo", "train", "data=coco8.yaml"], "yolo"),
        (["/opt/venv/bin/python", "/opt/venv/bin/yolo", "train"], "yolo"),
        (["python", "train.py", "--epochs", "3"], "train.py"),
        (
            ["python3.11", "-u", "-B", "-m", "torch.distributed.run", "t.py"],
            "torch.distributed.run",
        ),
        (["python3", "-um", "http.server"], "http.server"),
        (["python3", "-mhttp.server", "8000"], "http.server"),
        (["python3", "-W", "ignore", "-X", "dev", "train.py"], "train.py"),
        (["python3", "-Wignore", "train.py"], "train.py"),
        (["python3", "--check-hash-based-pycs", "never", "train.py"], "train.py"),
        (["python3", "-I", "--", "-weird-name.py"], "-weird-name.py"),
        (["python3", "-c", "import time; time.sleep(9)"], "python3"),
        (["python3", "-"], "python3"),
        (["python3"], "python3"),
        (["python3", "-m"], "python3"),
        (["pypy3", "bench.py"], "bench.py"),
        (["python3.13t", "x.py"], "x.py"),
        (["pythonista", "x.py"], "pythonista"),  # not an interpreter name
        (["/usr/bin/nvidia-persistenced", "--verbose"], "nvidia-persistenced"),
        (["torchrun", "--nproc_per_node=2", "train.py"], "torchrun"),
        (["python3", "/x/" + "a" * 100 + ".py"], "a" * 64),
        ([], ""),
    ],
)
def test_command_name(argv: list[str], expected: str) -> None:
    assert command_name(argv) == expected


# --- real processes --------------------------------------------------------------------


def test_module_form(tmp_path: Path, spawn: Spawn) -> None:
    (tmp_path / "fake_kernel_launcher.py").write_text(WAIT)
    child = spawn(
        [sys.executable, "-m", "fake_kernel_launcher", "-f", "kernel-1.json"], cwd=tmp_path
    )
    identity = IdentityCache().get(*key(child.pid))
    cgroup = read_cgroup_identity(child.pid)
    assert identity == ProcessIdentity(
        user=me(),
        uid=os.getuid(),
        command="fake_kernel_launcher",
        container=cgroup.container,
        pod=cgroup.pod,
        namespace="",
        job=cgroup.slurm_job,
        project="",
    )


def test_script_form(tmp_path: Path, spawn: Spawn) -> None:
    script = tmp_path / "train.py"
    script.write_text(WAIT)
    child = spawn([sys.executable, str(script), "--epochs", "3"])
    identity = IdentityCache().get(*key(child.pid))
    assert identity is not None and identity.command == "train.py"


def test_console_script_with_shebang(tmp_path: Path, spawn: Spawn) -> None:
    yolo = tmp_path / "bin" / "yolo"
    yolo.parent.mkdir()
    yolo.write_text(f"#!{sys.executable}\n{WAIT}")
    yolo.chmod(0o755)
    child = spawn([str(yolo), "train", "data=coco8.yaml"])
    # The kernel runs the interpreter with the script as its first argument.
    assert psutil.Process(child.pid).cmdline()[1] == str(yolo)
    identity = IdentityCache().get(*key(child.pid))
    assert identity is not None and identity.command == "yolo"


def test_computed_once_per_process(tmp_path: Path, spawn: Spawn) -> None:
    child = spawn([sys.executable, "-c", WAIT])
    cache = IdentityCache()
    first = cache.get(*key(child.pid))
    pid_and_start = key(child.pid)
    child.kill()
    child.wait()
    # Gone now: only the cache can answer, and it does.
    assert cache.get(*pid_and_start) is first is not None
    cache.prune({pid_and_start})
    assert len(cache) == 1
    cache.prune(set())
    assert len(cache) == 0
    assert cache.get(*pid_and_start) is None  # not cached and gone


def test_reused_pid_is_not_this_process(spawn: Spawn) -> None:
    child = spawn([sys.executable, "-c", WAIT])
    pid, ticks = key(child.pid)
    assert IdentityCache().get(pid, ticks - 1) is None


def test_vanished_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert IdentityCache().get(child.pid, 0) is None


def project_of(cache: IdentityCache, pid: int) -> str:
    identity = cache.get(*key(pid))
    assert identity is not None
    return identity.project


def test_project_by_user_and_group(spawn: Spawn) -> None:
    child = spawn([sys.executable, "-c", WAIT])
    group = grp.getgrgid(os.getgid()).gr_name
    by_group = ProjectMapping(projects=(ProjectRule(name="team", groups=(group,)),))
    assert project_of(IdentityCache(by_group), child.pid) == "team"
    by_user = ProjectMapping(
        projects=(
            ProjectRule(name="other", users=("nobody-else",)),
            ProjectRule(name="mine", users=(me(),)),
        ),
        default_project="shared",
    )
    assert project_of(IdentityCache(by_user), child.pid) == "mine"
    nobody = ProjectMapping(
        projects=(ProjectRule(name="other", users=("nobody-else",)),), default_project="shared"
    )
    assert project_of(IdentityCache(nobody), child.pid) == "shared"


def test_pod_name_and_namespace_from_the_kubelet_and_project(tmp_path: Path, spawn: Spawn) -> None:
    child = spawn([sys.executable, "-c", WAIT])
    # A process in a pod: psutil reads the real process, the cgroup comes from proc_root.
    proc = tmp_path / "proc" / str(child.pid)
    proc.mkdir(parents=True)
    pod = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"
    container = "8b1e0c9d2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c"
    (proc / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{pod.replace('-', '_')}.slice/cri-containerd-{container}.scope\n"
    )
    (proc / "stat").symlink_to(f"/proc/{child.pid}/stat")  # who it is: its start ticks
    (proc / "status").write_text(
        "Name:\tpython3\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t4242 4343\n"
    )
    mapping = ProjectMapping(
        projects=(
            ProjectRule(name="by-group", groups=("4343",)),  # unknown gid: matched as a number
            ProjectRule(name="nlp", namespaces=("nlp-train",)),
        )
    )
    held = {"GPU-a": PodRef("nlp-train", "bert-0", "trainer")}

    class Kubelet:  # the pod-resources client's interface (tests/kube has the gRPC one)
        def __init__(self, fail: bool = False) -> None:
            self.fail, self.calls = fail, 0

        def locate(self, uuid: str, *, max_age: float | None = None) -> PodRef | None:
            self.calls += 1
            if self.fail:
                raise RuntimeError("kubelet unreachable")
            return held.get(uuid)

    cache = IdentityCache(mapping, proc_root=tmp_path / "proc", pods=Kubelet())
    identity = cache.get(*key(child.pid), "GPU-a")
    assert identity is not None
    assert (identity.container, identity.pod_uid) == (container, pod)
    assert (identity.pod, identity.namespace) == ("bert-0", "nlp-train")
    assert identity.project == "by-group"  # first matching rule wins

    # A pod the kubelet cannot name (it failed, or the GPU is shared) is no pod name, and
    # is asked again after `unnamed_retry`, not on every scrape.
    now = [0.0]
    failing = Kubelet(fail=True)
    cache = IdentityCache(
        mapping, proc_root=tmp_path / "proc", pods=failing, unnamed_retry=10, clock=lambda: now[0]
    )
    for at in (0.0, 5.0, 11.0):
        now[0] = at
        identity = cache.get(*key(child.pid), "GPU-a")
        assert identity is not None and (identity.pod, identity.namespace) == ("", "")
        assert identity.pod_uid == pod
    assert failing.calls == 2
    failing.fail = False  # the kubelet answers again: named once the retry is due
    now[0] = 22.0
    identity = cache.get(*key(child.pid), "GPU-a")
    assert identity is not None and identity.pod == "bert-0"


# --- mapping files ---------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "projects.yaml"
    path.write_text(text)
    return path


def test_load_mapping(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "default_project: shared\n"
        "projects:\n"
        "  - name: vision\n    users: [alice]\n    groups: [cv]\n"
        "  - name: nlp\n    namespaces: [nlp-train]\n    users: [alice, bob]\n",
    )
    mapping = ProjectMapping.load(path)
    assert mapping.project_for("alice", [], "") == "vision"
    assert mapping.project_for("bob", [], "") == "nlp"
    assert mapping.project_for("carol", ["cv"], "") == "vision"
    assert mapping.project_for("carol", [], "nlp-train") == "nlp"
    assert mapping.project_for("carol", [], "") == "shared"


def test_empty_file_is_an_empty_mapping(tmp_path: Path) -> None:
    assert ProjectMapping.load(write(tmp_path, "")) == ProjectMapping()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("default_projet: x\n", "default_projet"),
        (
            "projects:\n  - name: a\n    users: [x]\n  - name: b\n    userz: [y]\n",
            "projects #2 (b).userz",
        ),
        ("projects:\n  - name: a\n", "projects #1 (a): a project needs at least one"),
        ("projects:\n  - users: [x]\n", "projects #1.name"),
        ("projects:\n  - name: a\n    users: alice\n", "projects #1 (a).users"),
        ("projects: [\n", "projects.yaml"),
        ("- just\n- a list\n", "projects.yaml"),
    ],
)
def test_invalid_mapping_names_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ProjectMappingError) as caught:
        ProjectMapping.load(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_missing_mapping_file(tmp_path: Path) -> None:
    with pytest.raises(ProjectMappingError, match=r"nope\.yaml"):
        ProjectMapping.load(tmp_path / "nope.yaml")


def test_a_hostile_program_name_is_a_label_chat_renders_as_text() -> None:
    """The rules' summaries carry `command` to Alertmanager's chat templates unescaped: a
    user-chosen name cannot mention everyone, link, or reverse itself with a bidi override."""
    name = command_name(["python3", "/home/x/<!channel> [x](e) @all\u202egnp.py\n"])
    assert name == "\u2039!channel\u203a \uff3bx\uff3d(e) \uff20allgnp.py"
    assert len(command_name(["x" * 500])) == 64
