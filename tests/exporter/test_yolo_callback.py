"""Ultralytics callbacks (exporter/yolo_callback.py), with a fake model and trainer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.yolo_callback import add_heartbeat_callbacks

Callback = Callable[[Any], None]


class FakeModel:
    """Records add_callback like ultralytics.Model; any other use fails loudly."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callback]] = {}

    def add_callback(self, event: str, func: Callback) -> None:
        self.callbacks.setdefault(event, []).append(func)

    def run(self, event: str, owner: object) -> None:
        for func in self.callbacks[event]:
            func(owner)


class FakeTrainer:
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch


def heartbeat_file(directory: Path) -> dict[str, Any]:
    (path,) = directory.iterdir()
    return json.loads(path.read_text())


def test_registers_ultralytics_events(tmp_path: Path) -> None:
    model = FakeModel()
    add_heartbeat_callbacks(model, tmp_path)
    assert set(model.callbacks) == {
        "on_train_batch_end",
        "on_val_batch_end",
        "on_fit_epoch_end",
        "on_train_end",
    }
    assert all(len(funcs) == 1 for funcs in model.callbacks.values())


def test_batches_and_epochs_are_recorded(tmp_path: Path) -> None:
    model = FakeModel()
    add_heartbeat_callbacks(model, tmp_path)
    trainer = FakeTrainer(epoch=0)
    model.run("on_train_batch_end", trainer)
    record = heartbeat_file(tmp_path)
    assert (record["pid"], record["epoch"], record["step"]) == (os.getpid(), 0, 1)

    for _ in range(4):  # within a second: rate-limited, the count still goes on
        model.run("on_train_batch_end", trainer)
    model.run("on_val_batch_end", object())
    model.run("on_fit_epoch_end", trainer)  # always written
    record = heartbeat_file(tmp_path)
    assert (record["epoch"], record["step"]) == (0, 5)

    trainer.epoch = 1
    model.run("on_fit_epoch_end", trainer)
    assert heartbeat_file(tmp_path)["epoch"] == 1


def test_training_end_removes_the_heartbeat(tmp_path: Path) -> None:
    model = FakeModel()
    add_heartbeat_callbacks(model, tmp_path)
    trainer = FakeTrainer(epoch=0)
    model.run("on_fit_epoch_end", trainer)
    model.run("on_train_end", trainer)
    assert list(tmp_path.iterdir()) == []
    model.run("on_fit_epoch_end", trainer)  # trained again with the same model
    assert heartbeat_file(tmp_path)["epoch"] == 0


def test_default_directory_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_RECLAIMER_HEARTBEAT_DIR", str(tmp_path))
    model = FakeModel()
    add_heartbeat_callbacks(model)
    model.run("on_fit_epoch_end", FakeTrainer(epoch=7))
    assert heartbeat_file(tmp_path)["epoch"] == 7


def test_imports_nothing_third_party() -> None:
    code = (
        "import sys; before = set(sys.modules); import exporter.yolo_callback; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(new - set(sys.stdlib_module_names)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['exporter']"
