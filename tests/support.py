"""Helpers shared by the test modules (fixtures are in conftest.py)."""

from __future__ import annotations

import socket
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


def hold(port: int, count: int, send: bytes = b"") -> list[socket.socket]:
    """`count` connections to 127.0.0.1:`port` that send `send` (maybe nothing) and wait."""
    held = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if send:
            s.sendall(send)
        held.append(s)
    return held
