"""The host memory a process's checkpoint may use: the kernel's MemAvailable, and, where its
memory cgroup (or one above it) is limited, what the tightest limit leaves (the checkpoint's
copy is charged to the process's own cgroup: over its limit, the kernel's OOM killer ends
the very process the suspend rung was keeping). cgroup v2 (`memory.max`, `memory.current`)
and v1's memory hierarchy (`memory.limit_in_bytes`, `memory.usage_in_bytes`) alike.

One reader of this evidence; None is "unknown", and an unknown room suspends nothing."""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")
CGROUP = Path("/sys/fs/cgroup")
# A v1 "no limit" reads as the largest page-aligned 64-bit value; anything near it is none.
_NO_LIMIT = 1 << 62


def mem_available(proc_root: Path = PROC) -> int | None:
    """The kernel's MemAvailable, bytes (None: unreadable)."""
    try:
        for line in (proc_root / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_room(pid: int, proc_root: Path = PROC, cgroup_root: Path = CGROUP) -> int | None:
    """Bytes the tightest memory limit over the process's cgroup and its ancestors leaves
    (`NO_ROOM_LIMIT` when none is limited); None when its cgroup cannot be read."""
    try:
        lines = (proc_root / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    entries = [line.split(":", 2) for line in lines]
    for hierarchy, controllers, path in (e for e in entries if len(e) == 3):
        if hierarchy != "0" and "memory" in controllers.split(","):  # v1's memory hierarchy
            return _room(
                cgroup_root / "memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes"
            )
    unified = cgroup_root if (cgroup_root / "cgroup.controllers").exists() else None
    for hierarchy, _controllers, path in (e for e in entries if len(e) == 3):
        if hierarchy == "0":  # v2 (a hybrid host mounts it at unified/)
            return _room(unified or cgroup_root / "unified", path, "memory.max", "memory.current")
    return None


NO_ROOM_LIMIT = 1 << 63  # no limit anywhere above the process: MemAvailable is the room


def _room(mount: Path, path: str, limit_file: str, usage_file: str) -> int | None:
    if ".." in path.split("/"):
        return None  # outside this cgroup namespace (a path from another namespace's root)
    leaf = mount / path.strip("/")
    if not leaf.is_dir():
        return None  # its cgroup is not visible here
    tightest = NO_ROOM_LIMIT
    for level in (leaf, *leaf.parents):
        try:
            limit = (level / limit_file).read_text().strip()
            usage = int((level / usage_file).read_text().strip())
        except FileNotFoundError:
            limit = "max"  # no memory controller at this level (the root has no files)
            usage = 0
        except (OSError, ValueError):
            return None
        if limit != "max" and limit.isdigit() and int(limit) < _NO_LIMIT:
            tightest = min(tightest, max(0, int(limit) - usage))
        if level == mount:
            break
    return tightest


def checkpoint_room(pid: int, proc_root: Path = PROC, cgroup_root: Path = CGROUP) -> int | None:
    """What the process's checkpoint may use: the host's MemAvailable and its cgroups' room,
    the tighter (None: either unknown)."""
    host = mem_available(proc_root)
    limited = cgroup_room(pid, proc_root, cgroup_root)
    if host is None or limited is None:
        return None
    return min(host, limited)
