"""Matching heartbeat files to host processes (exporter/heartbeat_reader.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from exporter.heartbeat_reader import (
    MAX_RECORD_BYTES,
    HeartbeatReader,
    ProcessRef,
    read_heartbeats,
)
from tests.support import Children

# A child that beats once through the real client, says so, and waits for stdin to close.
CHILD = """
import sys
from exporter.heartbeat import Heartbeat
assert Heartbeat(sys.argv[1]).beat(epoch=1, step=5)
print("ready", flush=True)
sys.stdin.readline()
"""
IDLE_CHILD = "import sys; print('ready', flush=True); sys.stdin.readline()"
Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn(children: Children) -> Spawn:
    return lambda *argv: children.start(argv)


def namespace_of(pid: int) -> int:
    link = os.readlink(f"/proc/{pid}/ns/pid")
    return int(link[link.index("[") + 1 : link.index("]")])


def start_ticks_of(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return int(raw[raw.rindex(b")") + 2 :].split()[19])


def write_record(path: Path, **record: object) -> None:
    path.write_text(json.dumps(record))


def test_real_child_is_matched(tmp_path: Path, spawn: Spawn) -> None:
    child = spawn(sys.executable, "-c", CHILD, str(tmp_path))
    other = spawn(sys.executable, "-c", IDLE_CHILD)  # no heartbeat: absent, not 0
    targets = [ProcessRef(child.pid), ProcessRef(other.pid), ProcessRef(child.pid)]
    found = read_heartbeats(tmp_path, targets)
    record = json.loads((tmp_path / f"{namespace_of(child.pid)}-{child.pid}.json").read_text())
    assert found == {child.pid: record["timestamp"]}


def test_dead_writer_with_reused_pid_is_not_matched(tmp_path: Path, spawn: Spawn) -> None:
    live = spawn(sys.executable, "-c", IDLE_CHILD)
    ns = namespace_of(live.pid)
    # A file left by an earlier process that had the same PID: its start ticks differ.
    write_record(
        tmp_path / f"{ns}-{live.pid}.json",
        pid=live.pid,
        pid_namespace=ns,
        start_ticks=start_ticks_of(live.pid) - 1,
        timestamp=1.0,
    )
    assert read_heartbeats(tmp_path, [ProcessRef(live.pid)]) == {}


def test_file_without_namespace_matches_host_pid(tmp_path: Path, spawn: Spawn) -> None:
    live = spawn(sys.executable, "-c", IDLE_CHILD)
    write_record(
        tmp_path / f"0-{live.pid}.json",
        pid=live.pid,
        pid_namespace=None,
        start_ticks=start_ticks_of(live.pid),
        timestamp=123.5,
    )
    assert read_heartbeats(tmp_path, [ProcessRef(live.pid)]) == {live.pid: 123.5}


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        "[]",
        "null",
        '{"pid": 1}',
        "\xff\xfe",
        '{"pid": "PID", "pid_namespace": "NS", "start_ticks": "T", "timestamp": 1}',
        "TIMESTAMP_WRONG",  # replaced below by a well-matched record with a bad timestamp
        "TIMESTAMP_BOOL",
    ],
)
def test_corrupt_files_are_ignored(tmp_path: Path, spawn: Spawn, content: str) -> None:
    live = spawn(sys.executable, "-c", IDLE_CHILD)
    path = tmp_path / f"{namespace_of(live.pid)}-{live.pid}.json"
    good = {
        "pid": live.pid,
        "pid_namespace": namespace_of(live.pid),
        "start_ticks": start_ticks_of(live.pid),
    }
    if content == "TIMESTAMP_WRONG":
        content = json.dumps({**good, "timestamp": "yesterday"})
    elif content == "TIMESTAMP_BOOL":
        content = json.dumps({**good, "timestamp": True})
    path.write_text(content)
    (tmp_path / "unrelated.txt").write_text("x")
    (tmp_path / "subdir.json").mkdir()
    assert read_heartbeats(tmp_path, [ProcessRef(live.pid)]) == {}


def test_missing_directory_and_vanished_process(tmp_path: Path) -> None:
    assert read_heartbeats(tmp_path / "missing", [ProcessRef(os.getpid())]) == {}
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert read_heartbeats(tmp_path, [ProcessRef(child.pid)]) == {}


def fake_process(
    proc: Path, host_pid: int, ns_pids: str, namespace: int, ticks: int, uid: int | None = None
) -> None:
    """A /proc/<pid> with just what the reader looks at."""
    uid = os.getuid() if uid is None else uid  # by default, the user that writes the files
    base = proc / str(host_pid)
    (base / "ns").mkdir(parents=True)
    (base / "status").write_text(
        f"Name:\tpython3\nPid:\t{host_pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        f"Gid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{ns_pids}\n"
    )
    (base / "ns" / "pid").symlink_to(f"pid:[{namespace}]")
    fields = ["S"] + ["0"] * 18 + [str(ticks)] + ["0"] * 30  # field 22 = index 19 after comm
    (base / "stat").write_text(f"{host_pid} (python3 (x) y) " + " ".join(fields) + "\n")


def test_container_pid_is_mapped_to_host_pid(tmp_path: Path) -> None:
    proc, beats = tmp_path / "proc", tmp_path / "beats"
    beats.mkdir()
    fake_process(proc, 4242, "4242\t7", 4026532000, 123456)
    fake_process(proc, 4343, "4343\t7", 4026532999, 123456)  # PID 7 of another container
    write_record(
        beats / "4026532000-7.json",
        pid=7,
        pid_namespace=4026532000,
        start_ticks=123456,
        timestamp=1700000000.25,
        epoch=3,
        step=None,
    )
    found = read_heartbeats(beats, [ProcessRef(4242), ProcessRef(4343)], proc_root=proc)
    assert found == {4242: 1700000000.25}


def test_container_file_needs_the_container_pid(tmp_path: Path) -> None:
    proc, beats = tmp_path / "proc", tmp_path / "beats"
    beats.mkdir()
    fake_process(proc, 4242, "4242\t7", 4026532000, 123456)
    # Right name, but the record says PID 8: not this process.
    write_record(
        beats / "4026532000-7.json",
        pid=8,
        pid_namespace=4026532000,
        start_ticks=123456,
        timestamp=5.0,
    )
    assert read_heartbeats(beats, [ProcessRef(4242)], proc_root=proc) == {}


def unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.skipif(
    not unshare_works(), reason="needs 'unshare --pid --fork --mount-proc' (root, util-linux)"
)
def test_real_pid_namespace(tmp_path: Path, spawn: Spawn) -> None:
    wrapper = spawn(
        "unshare",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        sys.executable,
        "-c",
        CHILD,
        str(tmp_path),
    )
    (inner,) = psutil.Process(wrapper.pid).children()
    ns = namespace_of(inner.pid)
    assert ns != namespace_of(os.getpid())
    record = json.loads((tmp_path / f"{ns}-1.json").read_text())
    assert record["pid"] == 1  # the PID the process sees in its namespace
    assert read_heartbeats(tmp_path, [ProcessRef(inner.pid)]) == {inner.pid: record["timestamp"]}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to other users")
def test_file_of_another_user_is_not_matched(tmp_path: Path) -> None:
    proc, beats = tmp_path / "proc", tmp_path / "beats"
    beats.mkdir()
    fake_process(proc, 4242, "4242\t7", 4026532000, 123456, uid=1000)
    path = beats / "4026532000-7.json"
    write_record(path, pid=7, pid_namespace=4026532000, start_ticks=123456, timestamp=5.0)
    os.chown(path, 1000, 1000)  # the process's own user
    assert read_heartbeats(beats, [ProcessRef(4242)], proc_root=proc) == {4242: 5.0}
    os.chown(path, 1001, 1001)  # someone else vouching for it
    assert read_heartbeats(beats, [ProcessRef(4242)], proc_root=proc) == {}


def container_process_with_a_beat(tmp_path: Path) -> tuple[Path, Path]:
    """A fake /proc with PID 4242 (PID 7 in its container) and its heartbeat at 5.0."""
    proc, beats = tmp_path / "proc", tmp_path / "beats"
    beats.mkdir()
    fake_process(proc, 4242, "4242\t7", 4026532000, 123456)
    write_record(
        beats / "4026532000-7.json",
        pid=7,
        pid_namespace=4026532000,
        start_ticks=123456,
        timestamp=5.0,
    )
    return proc, beats


def test_reader_remembers_a_process_until_its_pid_is_reused(tmp_path: Path) -> None:
    proc, beats = container_process_with_a_beat(tmp_path)
    reader = HeartbeatReader(proc)
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {4242: 5.0}
    # The namespace and the PID in it cannot change while the process lives: the next
    # scrape does not read them again (here they have become unreadable).
    (proc / "4242" / "status").write_text("garbage")
    (proc / "4242" / "ns" / "pid").unlink()
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {4242: 5.0}
    # The PID now belongs to a process started later, in the same container: the old
    # writer's file is not credited to it, whatever was remembered.
    shutil.rmtree(proc / "4242")
    fake_process(proc, 4242, "4242\t7", 4026532000, 999999)
    assert reader.read(beats, [ProcessRef(4242, 999999)]) == {}


@pytest.mark.reliability(46)
def test_reader_forgets_processes_that_left(tmp_path: Path) -> None:
    proc, beats = container_process_with_a_beat(tmp_path)
    reader = HeartbeatReader(proc)
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {4242: 5.0}
    assert reader.read(beats, []) == {}
    (proc / "4242" / "status").write_text("garbage")  # nothing remembered to fall back on
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to other users")
def test_reader_sees_a_process_change_its_user(tmp_path: Path) -> None:
    proc, beats = tmp_path / "proc", tmp_path / "beats"
    beats.mkdir()
    fake_process(proc, 4242, "4242\t7", 4026532000, 123456, uid=1000)
    path = beats / "4026532000-7.json"
    write_record(path, pid=7, pid_namespace=4026532000, start_ticks=123456, timestamp=5.0)
    os.chown(path, 1000, 1000)
    reader = HeartbeatReader(proc)
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {4242: 5.0}
    os.chown(path, 1001, 1001)
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {}  # not its user
    shutil.rmtree(proc / "4242")
    fake_process(proc, 4242, "4242\t7", 4026532000, 123456, uid=1001)  # it became 1001
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {4242: 5.0}
    os.chown(path, 1000, 1000)  # its former user no longer speaks for it
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {}


def test_reader_reads_a_file_again_once_it_changes(tmp_path: Path) -> None:
    proc, beats = tmp_path / "proc", tmp_path / "beats"
    beats.mkdir()
    fake_process(proc, 4242, "4242\t7", 4026532000, 123456)
    path = beats / "4026532000-7.json"
    record = {"pid": 7, "pid_namespace": 4026532000, "start_ticks": 123456}
    write_record(path, **record, timestamp=5.0)
    reader = HeartbeatReader(proc)
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {4242: 5.0}
    # The next beat, as exporter.heartbeat writes it: a new file renamed over the old one
    # (same size: only the inode tells them apart).
    write_record(tmp_path / "next.json", **record, timestamp=6.0)
    (tmp_path / "next.json").rename(path)
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {4242: 6.0}
    write_record(path, **record, timestamp=7.25)  # rewritten in place, another size
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {4242: 7.25}
    path.unlink()
    assert reader.read(beats, [ProcessRef(4242, 123456)]) == {}


def _read_within(seconds: float, read: Callable[[], dict[int, float]]) -> dict[int, float]:
    """The read's answer, failing (not hanging the suite) when it blocks."""
    answer: list[dict[int, float]] = []
    worker = threading.Thread(target=lambda: answer.append(read()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert answer, f"the read blocked for more than {seconds} s"
    return answer[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files for other users")
@pytest.mark.reliability(57)
def test_defect_1_named_pipe_of_another_uid_does_not_block_the_reader(tmp_path: Path) -> None:
    proc, beats = tmp_path / "proc", tmp_path / "beats"
    beats.mkdir()
    fake_process(proc, 4242, "4242\t7", 4026532000, 123456, uid=1000)
    pipe = beats / "4026532000-7.json"
    os.mkfifo(pipe)
    os.chown(pipe, 1001, 1001)  # another user's pipe under the job's heartbeat name
    found = _read_within(5, lambda: read_heartbeats(beats, [ProcessRef(4242)], proc_root=proc))
    assert found == {}
    # Even the process's own user cannot make a pipe count, nor hang the reader.
    os.chown(pipe, 1000, 1000)
    found = _read_within(5, lambda: read_heartbeats(beats, [ProcessRef(4242)], proc_root=proc))
    assert found == {}


@pytest.mark.reliability(57)
def test_defect_1_symlink_to_a_device_or_a_real_beat_is_not_followed(tmp_path: Path) -> None:
    proc, beats = container_process_with_a_beat(tmp_path)
    real = beats / "4026532000-7.json"
    elsewhere = tmp_path / "elsewhere.json"
    real.rename(elsewhere)
    real.symlink_to("/dev/zero")  # read without end by a reader that follows it
    reader = HeartbeatReader(proc)
    assert _read_within(5, lambda: reader.read(beats, [ProcessRef(4242)])) == {}
    real.unlink()
    real.symlink_to(elsewhere)  # a valid record out of the directory: still not followed
    assert _read_within(5, lambda: reader.read(beats, [ProcessRef(4242)])) == {}


@pytest.mark.reliability(57)
def test_defect_1_a_file_past_the_bound_is_not_read(tmp_path: Path) -> None:
    proc, beats = container_process_with_a_beat(tmp_path)
    path = beats / "4026532000-7.json"
    record = json.loads(path.read_text())
    assert read_heartbeats(beats, [ProcessRef(4242)], proc_root=proc) == {4242: 5.0}
    # The same valid record padded past the bound (JSON allows the whitespace).
    path.write_text(json.dumps(record) + " " * (MAX_RECORD_BYTES + 1))
    assert read_heartbeats(beats, [ProcessRef(4242)], proc_root=proc) == {}
