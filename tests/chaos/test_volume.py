"""The audit log's own small volume: full means ENOSPC for the next write, freed means
writes work again, and nothing is left mounted afterwards."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from actuator.chaos import volume
from actuator.chaos.volume import small_volume


def _mounted(path: Path) -> bool:
    return any(
        line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines()
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
def test_filled_is_enospc_freed_is_writable_and_nothing_stays_mounted(tmp_path: Path) -> None:
    with small_volume(tmp_path) as vol:
        assert vol is not None and _mounted(vol.path)
        log = vol.path / "audit.jsonl"
        log.write_text("a record\n")
        assert vol.fill() > (volume.SIZE_MIB - 1) * 2**20
        with pytest.raises(OSError) as full, log.open("a") as out:
            out.write("x" * 65536)
            out.flush()
        assert full.value.errno == errno.ENOSPC
        vol.free()
        with log.open("a") as out:
            out.write("another record\n")
        assert log.read_text().endswith("another record\n")
        path = vol.path
    assert not _mounted(path) and not path.exists()


def test_without_root_there_is_no_volume(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(volume.os, "geteuid", lambda: 1000)
    with small_volume() as vol:
        assert vol is None
