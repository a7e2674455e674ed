"""The room a checkpoint has (actuator/host_memory.py): MemAvailable and the tightest memory
cgroup limit over the process, in cgroup v2, v1 and a hybrid host's layout, and a real
memory cgroup of this host with a real process in it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from actuator.host_memory import NO_ROOM_LIMIT, cgroup_room, checkpoint_room, mem_available

GiB = 1024**3
PID = 4242


def _proc(tmp_path: Path, cgroup: str, available_kib: int = 64 * 1024 * 1024) -> Path:
    proc = tmp_path / "proc"
    (proc / str(PID)).mkdir(parents=True)
    (proc / str(PID) / "cgroup").write_text(cgroup)
    (proc / "meminfo").write_text(f"MemTotal: 1 kB\nMemAvailable: {available_kib} kB\n")
    return proc


def _level(path: Path, limit: str, usage: int, v2: bool = True) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(limit + "\n")
    (path / ("memory.current" if v2 else "memory.usage_in_bytes")).write_text(f"{usage}\n")


def test_v2_the_tightest_limit_over_the_process_is_its_room(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    _level(root / "user.slice", str(40 * GiB), 30 * GiB)  # 10 GiB left up here
    _level(root / "user.slice" / "job.scope", "max", 2 * GiB)  # unlimited itself
    proc = _proc(tmp_path, "0::/user.slice/job.scope\n")
    assert cgroup_room(PID, proc, root) == 10 * GiB
    assert checkpoint_room(PID, proc, root) == 10 * GiB  # tighter than 64 GiB available
    _level(root / "user.slice" / "job.scope", str(4 * GiB), 3 * GiB)
    assert cgroup_room(PID, proc, root) == GiB
    _level(root / "user.slice" / "job.scope", "max", 2 * GiB)
    _level(root / "user.slice", "max", 30 * GiB)
    assert cgroup_room(PID, proc, root) == NO_ROOM_LIMIT
    assert checkpoint_room(PID, proc, root) == 64 * GiB  # no limit: the host's room


def test_v1_memory_hierarchy_and_a_hybrid_hosts_unified_mount(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _level(root / "memory" / "slurm" / "job_7", str(8 * GiB), 5 * GiB, v2=False)
    v1 = _proc(tmp_path, "4:memory:/slurm/job_7\n3:cpu:/\n0::/\n")
    assert cgroup_room(PID, v1, root) == 3 * GiB
    unlimited = str(9223372036854771712)  # how v1 writes "no limit"
    _level(root / "memory" / "slurm" / "job_7", unlimited, 5 * GiB, v2=False)
    assert cgroup_room(PID, v1, root) == NO_ROOM_LIMIT
    hybrid = tmp_path / "hybrid"
    _level(hybrid / "unified" / "session.scope", str(2 * GiB), GiB)
    (tmp_path / "proc" / str(PID) / "cgroup").write_text("1:cpu:/\n0::/session.scope\n")
    assert cgroup_room(PID, v1, hybrid) == GiB


def test_an_unreadable_or_invisible_cgroup_is_unknown(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("memory\n")
    proc = _proc(tmp_path, "0::/another/namespace/path\n")
    assert cgroup_room(PID, proc, root) is None  # not visible here: unknown, never "room"
    assert checkpoint_room(PID, proc, root) is None
    assert cgroup_room(PID + 1, proc, root) is None  # gone
    (root / "kubepods").mkdir()
    (proc / str(PID) / "cgroup").write_text("0::/../kubepods\n")  # another namespace's root
    assert cgroup_room(PID, proc, root) is None
    _level(root / "x", "garbage", 0)
    (proc / str(PID) / "cgroup").write_text("0::/x\n")
    assert cgroup_room(PID, proc, root) == NO_ROOM_LIMIT  # a limit that is no number: none
    (root / "x" / "memory.current").write_text("not a number\n")
    assert cgroup_room(PID, proc, root) is None
    (proc / "meminfo").write_text("MemTotal: 1 kB\n")
    assert mem_available(proc) is None


def _memory_mount() -> tuple[Path, bool] | None:
    """This host's memory cgroup mount, and whether it is v2."""
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.controllers").exists():
        return (root, True) if "memory" in (root / "cgroup.controllers").read_text() else None
    return (root / "memory", False) if (root / "memory" / "cgroup.procs").exists() else None


def test_a_real_memory_cgroup_with_a_real_process_in_it() -> None:
    mount = _memory_mount()
    if os.geteuid() != 0 or mount is None:
        pytest.skip("needs root and a memory cgroup controller on this host")
    base, v2 = mount
    group = base / f"gpu-reclaimer-test-{os.getpid()}"
    group.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (group / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(GiB))
        (group / "cgroup.procs").write_text(str(sleeper.pid))
        room = cgroup_room(sleeper.pid)
        assert room is not None and GiB - 64 * 1024**2 <= room <= GiB
        host = mem_available()
        assert host is not None and checkpoint_room(sleeper.pid) == min(room, host)
    finally:
        sleeper.kill()
        sleeper.wait()
        group.rmdir()
