"""Fixtures for the actuator: real workloads on a simulated node, a real gunicorn actuator
(tests/helpers/actuator.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.actuator import Actuator, ActuatorFactory, Workloads


@pytest.fixture
def workloads(tmp_path: Path) -> Iterator[Workloads]:
    from exporter.sim.state import init_node

    node_dir = tmp_path / "node"
    init_node(node_dir, gpus=2, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    w = Workloads(node_dir)
    yield w
    w.cleanup()


@pytest.fixture
def actuator_factory(tmp_path: Path) -> Iterator[ActuatorFactory]:
    made: list[Actuator] = []

    def make(sim_dir: Path, name: str = "actuator", start: bool = True, **policy: Any) -> Actuator:
        a = Actuator(tmp_path / name, sim_dir, policy)
        made.append(a)
        return a.start() if start else a

    yield make
    for a in made:
        a.stop()
