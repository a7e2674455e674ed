"""Heartbeats for Ultralytics YOLO training in one line::

    from ultralytics import YOLO
    from exporter.yolo_callback import add_heartbeat_callbacks

    model = YOLO("yolov8n.pt")
    add_heartbeat_callbacks(model)
    model.train(data="coco8.yaml", epochs=10)

Beats after every training batch and every validation batch (a long validation is work too),
and after each epoch; removes the heartbeat file when training ends, so a notebook that keeps
the model afterwards is judged by its GPU use, not by a heartbeat that went stale.
Nothing from Ultralytics is imported: the model object is passed in. DDP runs started by
Ultralytics in subprocesses do not carry custom callbacks; call ``exporter.heartbeat.beat``
from your own code there.
"""

from __future__ import annotations

import os
from typing import Any

from exporter.heartbeat import Heartbeat


def add_heartbeat_callbacks(model: Any, directory: str | os.PathLike[str] | None = None) -> None:
    """Register heartbeat callbacks on an Ultralytics model (anything with ``add_callback``)."""
    heartbeat = Heartbeat(directory)
    steps = 0  # batches trained so far, over all epochs

    def on_train_batch_end(trainer: Any) -> None:
        nonlocal steps
        steps += 1
        heartbeat.beat(epoch=_epoch(trainer), step=steps)

    def on_val_batch_end(_validator: Any) -> None:
        heartbeat.beat()

    def on_fit_epoch_end(trainer: Any) -> None:
        # Always written: the epoch boundary is the progress users look at.
        heartbeat.beat(epoch=_epoch(trainer), step=steps, force=True)

    def on_train_end(_trainer: Any) -> None:
        heartbeat.close()

    model.add_callback("on_train_batch_end", on_train_batch_end)
    model.add_callback("on_val_batch_end", on_val_batch_end)
    model.add_callback("on_fit_epoch_end", on_fit_epoch_end)
    model.add_callback("on_train_end", on_train_end)


def _epoch(trainer: Any) -> int | None:
    epoch = getattr(trainer, "epoch", None)
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None
