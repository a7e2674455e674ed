"""Helpers shared by the test modules (fixtures are in conftest.py)."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
GiB = 1024**3
REPO = Path(__file__).resolve().parents[1]  # the checkout


def gpu_reclaimer_command() -> list[str]:
    """The `gpu-reclaimer` command, run by the test interpreter's environment."""
    return [sys.executable, "-m", "exporter.cli"]


def gpu_reclaimer(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `gpu-reclaimer ARGS` as a user types it; its exit status and both streams."""
    return subprocess.run(
        [*gpu_reclaimer_command(), *args], capture_output=True, text=True, timeout=timeout
    )


# Ports handed out by this process: the kernel may give a port that was just closed again
# to the next bind(0), and two of a test's servers (an agent and an exporter) then collide.
_GIVEN: set[int] = set()
# Test servers' ports come from below the kernel's ephemeral range (32768 and up by default):
# a port bind(0) gave is free for the next outgoing connection of any process to take as its
# source port, and the server started on it then fails with "address in use". Each xdist
# worker draws from its own slice, so two workers never hand out the same port.
_TEST_PORTS = range(10000, 20000)
_SERVICE_PORTS = range(20000, 29000)  # apart from the rendezvous defaults (29500, ...)


def _worker_slice(ports: range) -> range:
    """This xdist worker's own part of `ports` (pytest-randomly seeds every worker's
    `random` alike, so without slices two workers would draw the same ports together)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), 1)
    index = int(worker) % count if worker.isdigit() else 0
    size = len(ports) // count
    return range(ports.start + index * size, ports.start + (index + 1) * size)


def _draw(ports: range, host: str) -> int:
    for _ in range(200):
        port = random.choice(_worker_slice(ports))
        if port in _GIVEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise AssertionError(f"no free port between {ports.start} and {ports.stop - 1}")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the caller binds it soon after), never one
    this process handed out before, and never one an outgoing connection can take first."""
    return _draw(_TEST_PORTS, "127.0.0.1")


def free_service_port() -> int:
    """A TCP port free on every interface right now, below the kernel's ephemeral range and
    apart from the rendezvous defaults: a port a service is deployed on, not one bound to 0
    (which the exporter counts as a job's own rendezvous)."""
    return _draw(_SERVICE_PORTS, "0.0.0.0")


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll until predicate() is truthy and return its value. OSError and ValueError count
    as "not yet" (a server still starting: connection refused, half-written JSON); on
    timeout, fail naming the predicate and the last such error."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except (OSError, ValueError) as error:
            value, last_error = None, error  # type: ignore[assignment]
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"condition not met within {timeout}s: {predicate} (last error: {last_error})"
            )
        time.sleep(interval)


def http_get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


def wait_http(url: str, timeout: float = 30.0) -> None:
    """Wait until `url` answers 2xx."""
    wait_until(lambda: http_get(url) is not None, timeout=timeout, interval=0.1)


class Children:
    """Real child processes a test starts; every one is killed and reaped at the end."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(
        self, argv: Sequence[str], *, ready: bool = True, **popen: Any
    ) -> subprocess.Popen[str]:
        """Start `argv` with pipes for stdin and stdout; with `ready`, wait until its first
        line of output is "ready"."""
        popen.setdefault("stdout", subprocess.PIPE)
        child = subprocess.Popen(list(argv), stdin=subprocess.PIPE, text=True, **popen)
        self.started.append(child)
        if ready:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        return child

    def python(self, code: str, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
        return self.start([sys.executable, "-c", code, *args], **kwargs)

    def stop_all(self) -> None:
        for child in self.started:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=10)
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()


def hold(port: int, count: int, send: bytes = b"") -> list[socket.socket]:
    """`count` connections to 127.0.0.1:`port` that send `send` (maybe nothing) and wait."""
    held = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if send:
            s.sendall(send)
        held.append(s)
    return held
