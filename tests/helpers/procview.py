"""Views of /proc for tests of a stepped clock (a real step would disturb the machine)."""

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
