"""Heartbeats for Ultralytics YOLO training in one line::

    from ultralytics import YOLO
    from exporter.yolo_callback import add_heartbeat_callbacks

    model = YOLO("yolov8n.pt")
    add_heartbeat_callbacks(model)
    model.train(data="coco8.yaml", epochs=10)

A heartbeat exists only while training does. It beats after every training batch, every
validation batch *during training* (a long validation is work too) and each epoch; it is
removed when training ends (`on_train_end`, `teardown`) and when `train()` leaves by an
exception, so a notebook that keeps the model afterwards (an error, `model.val()`,
inference) is judged by its GPU use, never by a heartbeat that went stale and looks like a
hang. Evaluation outside training does not write one.

Works from Python with a `YOLO` model or a trainer (anything with ``add_callback`` and
``train``); the `yolo` command line takes no custom callbacks. Nothing from Ultralytics is
imported: the object is passed in. DDP runs started by Ultralytics in subprocesses do not
carry custom callbacks; call ``exporter.heartbeat.beat`` from your own code there.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from exporter.heartbeat import Heartbeat


def add_heartbeat_callbacks(model: Any, directory: str | os.PathLike[str] | None = None) -> None:
    """Register heartbeat callbacks on an Ultralytics model or trainer (anything with
    ``add_callback``), and make its ``train`` remove the heartbeat however it ends."""
    heartbeat = Heartbeat(directory)
    steps = 0  # batches trained so far, over all epochs
    training = False

    def on_train_start(_trainer: Any) -> None:
        nonlocal training
        training = True

    def on_train_batch_end(trainer: Any) -> None:
        nonlocal steps, training
        training = True
        steps += 1
        heartbeat.beat(epoch=_epoch(trainer), step=steps)

    def on_val_batch_end(_validator: Any) -> None:
        if training:  # validation inside training; `model.val()` later is not training
            heartbeat.beat()

    def on_fit_epoch_end(trainer: Any) -> None:
        if training:  # always written: the epoch boundary is the progress users look at
            heartbeat.beat(epoch=_epoch(trainer), step=steps, force=True)

    def stop(_trainer: Any = None) -> None:
        nonlocal training
        training = False
        heartbeat.close()

    model.add_callback("on_train_start", on_train_start)
    model.add_callback("on_train_batch_end", on_train_batch_end)
    model.add_callback("on_val_batch_end", on_val_batch_end)
    model.add_callback("on_fit_epoch_end", on_fit_epoch_end)
    model.add_callback("on_train_end", stop)
    model.add_callback("teardown", stop)
    _stop_when_train_returns(model, stop)


def _stop_when_train_returns(model: Any, stop: Any) -> None:
    """Ultralytics runs no callback when training raises: wrap this object's ``train`` so
    the heartbeat goes however it ends (an instance attribute; the class is untouched)."""
    train = getattr(model, "train", None)
    if not callable(train) or getattr(train, "_heartbeat_stops", False):
        return

    @functools.wraps(train)
    def train_then_stop(*args: Any, **kwargs: Any) -> Any:
        try:
            return train(*args, **kwargs)
        finally:
            stop()

    train_then_stop._heartbeat_stops = True  # type: ignore[attr-defined]
    object.__setattr__(model, "train", train_then_stop)


def _epoch(trainer: Any) -> int | None:
    epoch = getattr(trainer, "epoch", None)
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None
