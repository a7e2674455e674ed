"""Our own processes, by identity: a record counts only while its process lives with the
same start ticks on this boot, and only when root or the reader wrote it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from exporter import ownprocs, procfs


def test_this_process_is_recorded_and_read_back(tmp_path: Path) -> None:
    path = ownprocs.register("exporter", tmp_path)
    assert path is not None and path.name == f"exporter-{os.getpid()}.json"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    (own,) = ownprocs.registered(tmp_path)
    stat = procfs.read_stat(os.getpid())
    assert stat is not None
    assert (own.role, own.pid, own.start_ticks) == ("exporter", os.getpid(), stat.start_ticks)
    ownprocs.unregister(path)
    assert ownprocs.registered(tmp_path) == []


def test_stale_records_protect_nobody(tmp_path: Path) -> None:
    folder = tmp_path / "self"
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    dead = int(done.stdout)
    me = procfs.read_stat(os.getpid())
    assert me is not None
    boot = procfs.boot_id()
    records = {
        "dead": {"role": "agent", "pid": dead, "start_ticks": 1, "boot_id": boot},
        # This PID, but started at another time: a reused PID is another process.
        "reused": {
            "role": "agent",
            "pid": os.getpid(),
            "start_ticks": me.start_ticks + 1,
            "boot_id": boot,
        },
        "old-boot": {
            "role": "agent",
            "pid": os.getpid(),
            "start_ticks": me.start_ticks,
            "boot_id": "00000000-0000-4000-8000-000000000000",
        },
    }
    for name, record in records.items():
        (folder / f"{name}.json").write_text(json.dumps(record))
    (folder / "garbage.json").write_text("{not json")
    (folder / "partial.json").write_text(json.dumps({"role": "agent"}))
    assert ownprocs.registered(tmp_path) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the file to another user needs root")
def test_a_record_another_user_wrote_is_not_trusted(tmp_path: Path) -> None:
    path = ownprocs.register("actuator", tmp_path)
    assert path is not None and ownprocs.registered(tmp_path)
    os.chown(path, 65534, 65534)
    assert ownprocs.registered(tmp_path) == []  # nobody's file makes nothing immune


def test_an_unwritable_runtime_directory_is_logged_not_fatal(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert ownprocs.register("exporter", blocker) is None  # a file where the folder goes
    assert ownprocs.registered(blocker) == []


@pytest.mark.reliability(57)
def test_a_pipe_or_a_symlink_among_the_records_blocks_nothing(tmp_path: Path) -> None:
    """The records' directory is read as hostile input (exporter/hostile_file.py): a named
    pipe under a record's name, or a symlink to a device or to a real record elsewhere, is
    skipped at once; the real record still counts."""
    path = ownprocs.register("exporter", tmp_path)
    assert path is not None
    folder = tmp_path / "self"
    os.mkfifo(folder / "pipe.json")
    (folder / "zero.json").symlink_to("/dev/zero")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(path.read_text())
    (folder / "linked.json").symlink_to(elsewhere)
    found: list[list[ownprocs.OwnProcess]] = []
    reader = threading.Thread(target=lambda: found.append(ownprocs.registered(tmp_path)))
    reader.daemon = True
    reader.start()
    reader.join(5)
    assert found, "reading the records blocked"
    assert [own.pid for own in found[0]] == [os.getpid()]
