"""Our own processes, by identity: a record counts only while its process lives with the
same start ticks on this boot, and only when root or the reader wrote it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from exporter import ownprocs, procfs
from exporter.hostile_file import read_hostile


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


class CountingReads:
    """read_hostile, counting the files it opens by name."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, folder: int, name: str, *args: Any, **kwargs: Any) -> Any:
        self.names.append(name)
        return read_hostile(folder, name, *args, **kwargs)


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    return int(done.stdout)


def test_a_record_found_gone_is_not_read_again_until_it_is_rewritten(tmp_path: Path) -> None:
    """Records of killed processes stay until the next boot: each is judged once, then costs
    a look, not a read, while it is the same file; a rewrite is read afresh."""
    own = ownprocs.register("agent", tmp_path)
    assert own is not None
    folder = tmp_path / "self"
    boot = procfs.boot_id()
    gone = {"role": "actuator", "pid": _dead_pid(), "start_ticks": 1, "boot_id": boot}
    (folder / "actuator-1.json").write_text(json.dumps(gone))
    (folder / "other-boot.json").write_text(json.dumps({**gone, "boot_id": "0" * 8}))
    (folder / "garbage.json").write_text("{not json")
    reads = CountingReads()
    records = ownprocs.OwnRecords(tmp_path, read=reads)

    assert [p.pid for p in records.live()] == [os.getpid()]
    assert sorted(reads.names) == sorted(p.name for p in folder.iterdir())
    reads.names.clear()
    assert [p.pid for p in records.live()] == [os.getpid()]
    assert reads.names == [own.name]  # only the live record is read again

    # The same name, rewritten with a live identity (a new process took that PID): read.
    me = procfs.read_stat(os.getpid())
    assert me is not None
    alive = {**gone, "pid": os.getpid(), "start_ticks": me.start_ticks}
    tmp = folder / ".actuator-1.tmp"
    tmp.write_text(json.dumps(alive))
    os.replace(tmp, folder / "actuator-1.json")
    reads.names.clear()
    assert sorted(p.role for p in records.live()) == ["actuator", "agent"]
    assert "actuator-1.json" in reads.names


def test_a_process_proc_cannot_tell_about_is_asked_again(tmp_path: Path) -> None:
    """Gone for good only when /proc says so: an entry that exists but cannot be read (here
    its stat a directory) is not counted now and judged again the next time."""
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "sys/kernel/random/boot_id").write_text("boot-a\n")
    (proc / "4242/stat").mkdir(parents=True)  # exists, unreadable as a file
    runtime = tmp_path / "run"
    (runtime / "self").mkdir(parents=True)
    record = {"role": "exporter", "pid": 4242, "start_ticks": 7, "boot_id": "boot-a"}
    (runtime / "self/exporter-4242.json").write_text(json.dumps(record))
    (runtime / "self/exporter-4343.json").write_text(json.dumps({**record, "pid": 4343}))
    reads = CountingReads()
    records = ownprocs.OwnRecords(runtime, proc, read=reads)
    assert records.live() == []
    reads.names.clear()
    assert records.live() == []
    assert reads.names == ["exporter-4242.json"]  # 4343 has no /proc entry: gone

    # The process turns out to be alive after all: it counts.
    (proc / "4242/stat").rmdir()
    (proc / "4242/stat").write_text("4242 (exporter) S 1 4242 4242 0 -1 4194560" + " 0" * 12 + " 7")
    assert [p.pid for p in records.live()] == [4242]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the file to another user needs root")
def test_a_record_given_back_to_root_is_trusted_again(tmp_path: Path) -> None:
    path = ownprocs.register("actuator", tmp_path)
    assert path is not None
    records = ownprocs.OwnRecords(tmp_path)
    os.chown(path, 65534, 65534)
    assert records.live() == []
    os.chown(path, 0, 0)  # a new owner is a new ctime: judged again
    assert [p.pid for p in records.live()] == [os.getpid()]
