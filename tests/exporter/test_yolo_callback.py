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
    """Records add_callback like ultralytics.Model and runs them in the order Ultralytics'
    trainer and validator do (engine/trainer.py, engine/validator.py); anything else fails
    loudly."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callback]] = {}

    def add_callback(self, event: str, func: Callback) -> None:
        self.callbacks.setdefault(event, []).append(func)

    def run(self, event: str, owner: object) -> None:
        for func in self.callbacks.get(event, []):
            func(owner)

    def train(self, epochs: int = 2, batches: int = 3, fail_at: int | None = None) -> None:
        trainer = FakeTrainer(epoch=0)
        self.run("on_pretrain_routine_start", trainer)
        self.run("on_pretrain_routine_end", trainer)
        self.run("on_train_start", trainer)
        for epoch in range(epochs):
            trainer.epoch = epoch
            self.run("on_train_epoch_start", trainer)
            for batch in range(batches):
                self.run("on_train_batch_start", trainer)
                if fail_at is not None and epoch * batches + batch == fail_at:
                    raise RuntimeError("CUDA out of memory")  # no callback runs after this
                self.run("on_train_batch_end", trainer)
            self.run("on_train_epoch_end", trainer)
            self.val()
            self.run("on_fit_epoch_end", trainer)
        self.run("on_train_end", trainer)
        self.run("teardown", trainer)

    def val(self) -> None:
        validator = object()
        self.run("on_val_start", validator)
        for _ in range(2):
            self.run("on_val_batch_start", validator)
            self.run("on_val_batch_end", validator)
        self.run("on_val_end", validator)


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
        "on_train_start",
        "on_train_batch_end",
        "on_val_batch_end",
        "on_fit_epoch_end",
        "on_train_end",
        "teardown",
    }
    assert all(len(funcs) == 1 for funcs in model.callbacks.values())


def test_batches_and_epochs_are_recorded(tmp_path: Path) -> None:
    model = FakeModel()
    add_heartbeat_callbacks(model, tmp_path)
    trainer = FakeTrainer(epoch=0)
    model.run("on_train_start", trainer)
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


@pytest.mark.reliability(50)
def test_a_heartbeat_exists_only_while_training_does(tmp_path: Path) -> None:
    """Ended normally, ended by an exception, evaluated afterwards, trained again."""
    model = FakeModel()
    add_heartbeat_callbacks(model, tmp_path)
    seen: list[int] = []
    model.add_callback("on_train_batch_end", lambda _t: seen.append(len(list(tmp_path.iterdir()))))
    model.train()
    assert seen and all(n == 1 for n in seen)  # there while it trained
    assert list(tmp_path.iterdir()) == []  # gone at the end
    model.val()  # evaluation after training is not training
    assert list(tmp_path.iterdir()) == []

    with pytest.raises(RuntimeError):
        model.train(fail_at=4)  # no Ultralytics callback runs after the exception
    assert list(tmp_path.iterdir()) == []  # gone all the same (train() was wrapped)
    model.val()
    assert list(tmp_path.iterdir()) == []

    seen.clear()
    model.train(epochs=1)  # trained again with the same model
    assert seen and all(n == 1 for n in seen)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.reliability(50)
def test_a_heartbeat_that_cannot_be_removed_is_marked_closed_and_not_counted(
    tmp_path: Path,
) -> None:
    from exporter.heartbeat import Heartbeat
    from exporter.heartbeat_reader import ProcessRef, read_heartbeats

    hb = Heartbeat(tmp_path)
    assert hb.beat(step=1)
    assert read_heartbeats(tmp_path, [ProcessRef(os.getpid())])[os.getpid()] > 0
    os.unlink(hb.path)
    os.mkdir(hb.path)  # unlink() of a directory fails: the file cannot be removed
    try:
        hb.close()
    finally:
        os.rmdir(hb.path)
    assert hb.beat(step=2)
    record = json.loads(Path(hb.path).read_text())
    assert "closed" not in record
    hb._write(closed=True)  # what close() writes where it cannot remove the file
    assert json.loads(Path(hb.path).read_text())["closed"] is True
    assert os.getpid() not in read_heartbeats(tmp_path, [ProcessRef(os.getpid())])


def test_default_directory_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_RECLAIMER_HEARTBEAT_DIR", str(tmp_path))
    model = FakeModel()
    add_heartbeat_callbacks(model)
    model.run("on_train_start", FakeTrainer(epoch=7))
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
