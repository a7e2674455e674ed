"""A small volume of its own for the actuator's audit log, so that a chaos run can fill it
(ENOSPC, as a full disk gives) and free it again: a tmpfs of a fixed size, mounted as root.
Elsewhere there is none, and the fault is skipped (the report says so)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

SIZE_MIB = 64  # an hour's audit is about 6 MiB


class SmallVolume:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def fill(self) -> int:
        """Write zeros until the volume is full; returns the bytes written."""
        written = 0
        block = b"\0" * (1 << 20)
        with contextlib.suppress(OSError), self.filler.open("ab", buffering=0) as out:
            while True:
                written += out.write(block)
        with contextlib.suppress(OSError), self.filler.open("ab", buffering=0) as out:
            while True:  # the last partial megabyte, a kilobyte at a time
                written += out.write(block[:1024])
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


@contextlib.contextmanager
def small_volume(parent: Path | None = None) -> Iterator[SmallVolume | None]:
    """A mounted tmpfs of `SIZE_MIB`, unmounted and removed afterwards; None when this
    process cannot mount one (not root, or no mount permission in a container)."""
    if os.geteuid() != 0:
        yield None
        return
    path = Path(tempfile.mkdtemp(prefix="gpu-reclaimer-chaos-audit-", dir=parent))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE_MIB}m,mode=0755", "tmpfs", str(path)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        path.rmdir()
        yield None
        return
    try:
        yield SmallVolume(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
        with contextlib.suppress(OSError):
            path.rmdir()
