"""Helpers shared by the test modules (fixtures are in conftest.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

GiB = 1024**3


def gpu_reclaimer_command() -> list[str]:
    """The `gpu-reclaimer` command, run by the test interpreter's environment."""
    return [sys.executable, "-m", "exporter.cli"]


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.05):
    """Poll until predicate() is truthy; return its value or fail with a clear message."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)
