"""`gpu-reclaimer wait` as a user runs it (actuator/tools/wait_cli.py), against a Unix socket that
answers as a scripted actuator would: served, refused, listing, and the ways a socket can
fail (none there, closed mid-wait, not the actuator's JSON); each failure one line, exit 2."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.sockets import ScriptedSocket, json_line
from tests.support import gpu_reclaimer


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "keep.sock"


def wait(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return gpu_reclaimer("wait", *args, "--socket", str(sock))


QUEUED = json_line(ok=True, queued=3, position=2, node="gpu-01")


def test_a_served_wait_ends_with_the_devices_to_use(sock: Path) -> None:
    gpus = [{"index": 1, "uuid": "GPU-b", "memory_free": None}, {"index": 3, "uuid": "GPU-d"}]
    server = ScriptedSocket(sock, QUEUED, json_line(ok=True, gpus=gpus, node="gpu-01"))
    done = wait(sock, "--gpus", "2", "--for", "1h")
    server.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout == "CUDA_VISIBLE_DEVICES=1,3\n"
    assert "waiting on gpu-01 (position 2; up to 1h)" in done.stderr
    assert "GPU 3 (GPU-d) on gpu-01 is yours" in done.stderr
    assert server.requests == [{"action": "wait", "gpus": 2, "memory": 0, "seconds": 3600.0}]


def test_the_queue_is_listed(sock: Path) -> None:
    waiter = {"position": 1, "user": "alice", "uid": 1001, "gpus": 1, "memory": 0, "since": 0}
    server = ScriptedSocket(sock, json_line(ok=True, waiters=[waiter]))
    done = wait(sock, "--list")
    server.close()
    assert done.returncode == 0 and "  1. alice (uid 1001) wants 1 GPU(s), waiting" in done.stdout
    empty = ScriptedSocket(sock.with_name("empty.sock"), json_line(ok=True, waiters=[]))
    assert wait(sock.with_name("empty.sock"), "--list").stdout == "nobody is waiting on this node\n"
    empty.close()


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ((json_line(ok=False, error="wait for at most 7d"),), "wait for at most 7d"),
        ((QUEUED,), "the actuator closed the connection (restarted?): wait again"),
        ((b"HTTP/1.1 400 Bad Request\r\n",), "did not answer as the actuator does"),
        ((b"[1, 2]\n",), "did not answer as the actuator does"),
        ((QUEUED, json_line(ok=True, gpus="all")), "the actuator's answer names no GPUs"),
    ],
)
def test_each_failure_is_one_line(sock: Path, answers: tuple[bytes, ...], message: str) -> None:
    server = ScriptedSocket(sock, *answers)
    done = wait(sock, "--gpus", "1")
    server.close()
    assert (done.returncode, done.stdout) == (2, ""), done
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2  # the one line, after "waiting on"


def test_no_socket_says_what_to_check(sock: Path) -> None:
    done = wait(sock, "--memory", "20GiB")
    assert done.returncode == 2 and "is the actuator running on this node" in done.stderr
