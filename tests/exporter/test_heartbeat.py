"""The heartbeat client that training scripts call (exporter/heartbeat.py)."""

from __future__ import annotations

import ast
import json
import os
import time
from pathlib import Path

import pytest

import exporter.heartbeat as heartbeat_module
from exporter.heartbeat import DEFAULT_DIR, ENV_DIR, Heartbeat


def own_namespace() -> int:
    link = os.readlink("/proc/self/ns/pid")
    return int(link[link.index("[") + 1 : link.index("]")])


def own_start_ticks() -> int:
    raw = Path("/proc/self/stat").read_bytes()
    return int(raw[raw.rindex(b")") + 2 :].split()[19])


def test_writes_the_documented_record(tmp_path: Path) -> None:
    hb = Heartbeat(tmp_path)
    before = time.time()
    assert hb.beat(epoch=2, step=40)
    path = tmp_path / f"{own_namespace()}-{os.getpid()}.json"
    assert hb.path == str(path)
    record = json.loads(path.read_text())
    assert record == {
        "pid": os.getpid(),
        "pid_namespace": own_namespace(),
        "start_ticks": own_start_ticks(),
        "timestamp": record["timestamp"],
        "epoch": 2,
        "step": 40,
    }
    assert before <= record["timestamp"] <= time.time()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_rate_limited_and_keeps_progress(tmp_path: Path) -> None:
    hb = Heartbeat(tmp_path, min_interval=3600)
    assert hb.beat(epoch=0, step=1)
    assert not hb.beat(step=2)  # too soon: not written, but remembered
    hb.min_interval = 0
    assert hb.beat()
    record = json.loads(Path(hb.path).read_text())
    assert (record["epoch"], record["step"]) == (0, 2)


def test_creates_the_directory(tmp_path: Path) -> None:
    hb = Heartbeat(tmp_path / "a" / "b")
    assert hb.beat()
    assert Path(hb.path).is_file()


def test_never_raises_when_it_cannot_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    hb = Heartbeat(blocker / "heartbeats", min_interval=0)
    assert hb.beat(step=1) is False
    assert hb.beat(step=2) is False
    hb.close()
    warnings = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(warnings) == 1  # warned once, not on every batch


def test_failed_write_is_rate_limited_too(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    hb = Heartbeat(blocker, min_interval=3600)
    assert hb.beat() is False
    blocker.unlink()
    assert hb.beat() is False  # not retried within the interval


def test_close_removes_the_file_and_beat_recreates_it(tmp_path: Path) -> None:
    with Heartbeat(tmp_path, min_interval=3600) as hb:
        assert hb.beat()
        hb.close()
        assert list(tmp_path.iterdir()) == []
        assert hb.beat()  # close() also resets the rate limit
        assert Path(hb.path).exists()
    assert list(tmp_path.iterdir()) == []
    hb.close()  # closing twice is fine


def test_directory_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    assert Heartbeat().directory == str(tmp_path)
    monkeypatch.delenv(ENV_DIR)
    assert Heartbeat().directory == DEFAULT_DIR == "/run/gpu-reclaimer/heartbeats"


def test_module_level_beat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    monkeypatch.setattr(heartbeat_module, "_default", None)
    assert heartbeat_module.beat(epoch=1)
    default = heartbeat_module._default
    assert default is not None and default.directory == str(tmp_path)
    assert json.loads(Path(default.path).read_text())["epoch"] == 1
    default.close()


def test_forked_child_writes_its_own_file(tmp_path: Path) -> None:
    hb = Heartbeat(tmp_path, min_interval=3600)
    assert hb.beat(step=1)
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os._exit(0 if hb.beat(step=2) else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    record = json.loads((tmp_path / f"{own_namespace()}-{child}.json").read_text())
    assert record["pid"] == child and record["step"] == 2
    assert json.loads(Path(hb.path).read_text())["step"] == 1


def test_client_is_standard_library_only() -> None:
    # Users copy this one file next to their training script.
    tree = ast.parse(Path(heartbeat_module.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0
    }
    imported.discard("__future__")
    assert imported <= set(__import__("sys").stdlib_module_names)


class Scalar:
    """Like a numpy or torch scalar: not JSON, but convertible."""

    def __int__(self) -> int:
        return 12


def test_progress_of_other_number_types(tmp_path: Path) -> None:
    hb = Heartbeat(tmp_path)
    assert hb.beat(epoch=Scalar(), step=object())  # type: ignore[arg-type]
    record = json.loads(Path(hb.path).read_text())
    assert (record["epoch"], record["step"]) == (12, None)
