"""Reading files others can write as hostile input (exporter/hostile_file.py)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.hostile_file import HostileRead, Refusal, open_directory, read_hostile


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[int]:
    fd = open_directory(str(tmp_path))
    assert fd is not None
    yield fd
    os.close(fd)


def anyone(owner: int) -> bool:
    return True


def test_a_regular_file_is_read(tmp_path: Path, folder: int) -> None:
    (tmp_path / "a.json").write_bytes(b"{}")
    read = read_hostile(folder, "a.json", anyone, 4096)
    assert isinstance(read, HostileRead)
    assert read.data == b"{}"
    assert read.stat.st_uid == os.getuid()


def test_what_is_not_a_regular_file_is_refused_without_opening(tmp_path: Path, folder: int) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to("/dev/zero")
    (tmp_path / "dir").mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        for name in ("pipe", "link", "dir", "sock"):
            assert read_hostile(folder, name, anyone, 4096) is Refusal.NOT_REGULAR, name


@pytest.mark.parametrize("name", ["", ".", "..", "../etc/passwd", "a/b"])
def test_only_a_plain_name_is_resolved(folder: int, name: str) -> None:
    assert read_hostile(folder, name, anyone, 4096) is Refusal.BAD_NAME


def test_the_owner_is_judged_before_reading(tmp_path: Path, folder: int) -> None:
    (tmp_path / "a.json").write_bytes(b"{}")
    asked: list[int] = []

    def nobody(owner: int) -> bool:
        asked.append(owner)
        return False

    assert read_hostile(folder, "a.json", nobody, 4096) is Refusal.OWNER
    assert asked == [os.getuid()]


def test_reads_are_bounded(tmp_path: Path, folder: int) -> None:
    (tmp_path / "exact").write_bytes(b"x" * 10)
    (tmp_path / "over").write_bytes(b"x" * 11)
    assert isinstance(read_hostile(folder, "exact", anyone, max_bytes=10), HostileRead)
    assert read_hostile(folder, "over", anyone, max_bytes=10) is Refusal.TOO_LARGE


def test_a_missing_file_is_missing(folder: int) -> None:
    assert read_hostile(folder, "absent", anyone, 4096) is Refusal.MISSING
