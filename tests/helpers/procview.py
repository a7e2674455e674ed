"""Views of /proc for tests: a stepped clock (a real step would disturb the machine), and
process entries written by hand (a parentage or an owner no test could arrange for real)."""

from __future__ import annotations

import os
from pathlib import Path


def stepped_proc(tmp_path: Path, seconds: int = 3600) -> Path:
    """A view of /proc whose boot time reads `seconds` later, as after `date -s +1h`:
    /proc/stat's btime follows the wall clock, start ticks and the boot id do not."""
    root = tmp_path / "proc"
    root.mkdir()
    for name in os.listdir("/proc"):
        if name.isdigit() or name == "sys":
            (root / name).symlink_to(f"/proc/{name}")
    lines = []
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            line = f"btime {int(line.split()[1]) + seconds}"
        lines.append(line)
    (root / "stat").write_text("\n".join(lines) + "\n")
    return root


def fake_process_entry(
    proc: Path,
    pid: int,
    *,
    ppid: int = 1,
    comm: str = "python3",
    uid: int = 0,
    start_ticks: int = 1000,
    environ: dict[str, str] | None = None,
    cgroup: str = "0::/user.slice\n",
) -> Path:
    """/proc/<pid> with the files the exporter's readers open: stat, status, comm, environ,
    cgroup. Fields not given are zero, as for a process that has done nothing yet."""
    base = proc / str(pid)
    base.mkdir(parents=True)
    fields = ["S", str(ppid)] + ["0"] * 17 + [str(start_ticks)] + ["0"] * 30
    (base / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")
    ids = "\t".join([str(uid)] * 4)
    (base / "status").write_text(f"Name:\t{comm}\nPid:\t{pid}\nUid:\t{ids}\nGid:\t{ids}\n")
    (base / "comm").write_text(comm + "\n")
    (base / "environ").write_bytes(
        b"".join(f"{k}={v}".encode() + b"\0" for k, v in (environ or {}).items())
    )
    (base / "cgroup").write_text(cgroup)
    return base
