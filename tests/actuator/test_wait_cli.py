"""`gpu-reclaimer wait`'s client (actuator/tools/wait_cli.py) against the real server half
(actuator/demand/wait_socket.py) behind a UNIX socket: a request the node can never meet
ends at once with exit 2 and the reason, not after --for of waiting; one that waited out
--for ends with exit 3 (gave up), so a script tells "try later" from "fix the command"."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actuator.audit import AuditLog
from actuator.demand.wait_socket import serve_wait
from actuator.demand.waitlist import WaitList
from actuator.keep_socket import read_line
from actuator.store import Store
from exporter.nvml_reader import GpuReading, NvmlReading
from tests.support import gpu_reclaimer

GIB = 1 << 30


def _two_gpus(_not_before: float) -> NvmlReading:
    gpus = tuple(GpuReading(i, f"GPU-{i}", "H100", 80 * GIB, 0, 0.0, True, ()) for i in (0, 1))
    return NvmlReading(True, gpus=gpus)


def _two_gpus_taken(_not_before: float) -> NvmlReading:
    gpus = tuple(
        GpuReading(i, f"GPU-{i}", "H100", 80 * GIB, 70 * GIB, 0.0, True, ()) for i in (0, 1)
    )
    return NvmlReading(True, gpus=gpus)


@pytest.fixture
def wait_socket(tmp_path: Path) -> Iterator[Path]:
    yield from _serving(tmp_path, _two_gpus)


@pytest.fixture
def taken_socket(tmp_path: Path) -> Iterator[Path]:
    yield from _serving(tmp_path, _two_gpus_taken)


def _serving(tmp_path: Path, reading) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """One connection served as the keep socket serves a `wait` (the caller's credentials
    from SO_PEERCRED, as there)."""
    store = Store(tmp_path / "db")
    store.init()
    waitlist = WaitList(store, "n1", reading, time.time)
    audit = AuditLog(tmp_path / "audit.jsonl")
    path = tmp_path / "k.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            caller = struct.unpack("3i", creds)
            request = json.loads(read_line(conn, time.monotonic() + 10))
            serve_wait(conn, waitlist, audit, caller, request, poll=0.05)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path
    server.close()


def test_a_request_the_node_can_never_meet_ends_at_once_with_exit_2(wait_socket: Path) -> None:
    began = time.monotonic()
    done = gpu_reclaimer("wait", "--gpus", "4", "--socket", str(wait_socket), timeout=30)
    assert done.returncode == 2, done.stderr
    assert "n1 has 2 GPUs, not 4" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - began < 20  # not --for (24 h by default)


def test_a_wait_that_runs_out_of_time_exits_3_saying_it_gave_up(taken_socket: Path) -> None:
    done = gpu_reclaimer(
        "wait", "--gpus", "1", "--for", "300ms", "--socket", str(taken_socket), timeout=30
    )
    assert done.returncode == 3, done.stderr
    assert "gpu-reclaimer wait: gave up: no GPU was free within 300ms" in done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
