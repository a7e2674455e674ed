"""Opt-in check (not part of `make test`): the heartbeat's lifecycle with the real Ultralytics
package. Trains tiny models (YOLOv8n and, where the package has it, YOLO26n, both from their
YAML, no weights downloaded) on a synthetic data set on the CPU, and asserts:

- during training the heartbeat file exists, keyed to the training process;
- it is gone when training ends, when training raises, and after `model.val()` that follows;
- a trainer object works as a model does.

Run it with `make check-ultralytics` (a throwaway venv with PyTorch and Ultralytics), or in
any environment that has both: `python checks/ultralytics_heartbeat.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.yolo_callback import add_heartbeat_callbacks

IMAGES = 8
SIZE = 64


def synthetic_dataset(root: Path) -> Path:
    """A few noise images with one box each, in Ultralytics' YOLO format."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(7)
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for i in range(IMAGES):
            pixels = rng.integers(0, 255, (SIZE, SIZE, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / "images" / split / f"{i}.jpg")
            (root / "labels" / split / f"{i}.txt").write_text("0 0.5 0.5 0.4 0.4\n")
    data = root / "data.yaml"
    data.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames:\n  0: thing\n")
    return data


def files(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in directory.glob("*.json")]


def train_args(data: Path, project: Path) -> dict[str, Any]:
    return {
        "data": str(data),
        "epochs": 2,
        "imgsz": SIZE,
        "batch": 4,
        "device": "cpu",
        "workers": 0,
        "plots": False,
        "amp": False,
        "project": str(project),
        "exist_ok": True,
        "verbose": False,
    }


def check_model(yaml: str, data: Path, work: Path) -> list[str]:
    from ultralytics import YOLO

    beats = work / f"beats-{yaml}"
    beats.mkdir()
    model = YOLO(yaml)
    add_heartbeat_callbacks(model, beats)
    seen: list[list[dict[str, Any]]] = []
    model.add_callback("on_train_batch_end", lambda _t: seen.append(files(beats)))
    model.train(**train_args(data, work / "runs"))
    problems = []
    if not seen or any(len(s) != 1 or s[0]["pid"] != os.getpid() for s in seen):
        problems.append(f"{yaml}: during training the heartbeat was {seen[:3]}")
    if files(beats):
        problems.append(f"{yaml}: the heartbeat outlived a normal end of training")
    model.val(
        data=str(data),
        imgsz=SIZE,
        batch=4,
        device="cpu",
        workers=0,
        plots=False,
        project=str(work / "runs"),
        exist_ok=True,
        verbose=False,
    )
    if files(beats):
        problems.append(f"{yaml}: model.val() after train() re-created the heartbeat")

    def fail(trainer: Any) -> None:
        if trainer.epoch == 1:
            raise RuntimeError("a training error (simulated)")

    failing = YOLO(yaml)
    add_heartbeat_callbacks(failing, beats)
    failing.add_callback("on_train_batch_end", fail)
    try:
        failing.train(**train_args(data, work / "runs"))
        problems.append(f"{yaml}: the simulated error did not stop training")
    except RuntimeError:
        pass
    if files(beats):
        problems.append(f"{yaml}: the heartbeat outlived an exception in training")
    return problems


def check_trainer(data: Path, work: Path) -> list[str]:
    from ultralytics.models.yolo.detect import DetectionTrainer

    beats = work / "beats-trainer"
    beats.mkdir()
    trainer = DetectionTrainer(overrides={"model": "yolov8n.yaml", **train_args(data, work)})
    add_heartbeat_callbacks(trainer, beats)
    seen: list[int] = []
    trainer.add_callback("on_train_batch_end", lambda _t: seen.append(len(files(beats))))
    trainer.train()
    problems = []
    if not seen or set(seen) != {1}:
        problems.append(f"trainer: during training {seen[:5]} heartbeat files")
    if files(beats):
        problems.append("trainer: the heartbeat outlived training")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["yolov8n.yaml", "yolo26n.yaml"])
    args = parser.parse_args(argv)
    import ultralytics

    print(f"Ultralytics {ultralytics.__version__}, Python {sys.version.split()[0]}")
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ultralytics-check-") as tmp:
        work = Path(tmp)
        os.environ["YOLO_CONFIG_DIR"] = str(work / "config")  # no writes to the user's home
        data = synthetic_dataset(work / "data")
        for yaml in args.models:
            try:
                found = check_model(yaml, data, work)
            except FileNotFoundError as exc:
                print(f"{yaml}: not in this Ultralytics ({exc}); skipped")
                continue
            problems += found
            print(f"{yaml}: {'ok' if not found else 'FAILED'}")
        found = check_trainer(data, work)
        problems += found
        print(f"DetectionTrainer: {'ok' if not found else 'FAILED'}")
    for problem in problems:
        print("FAILED:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
