"""One `gpu-reclaimer wait` on the keep socket (actuator/demand/wait_socket.py), over a real socket
pair, a real store and audit log: a request that makes no sense is refused and queues
nothing; a caller is answered with its place, then with GPUs, its time being up, or, when
it hangs up, nothing; an audit log that cannot be written refuses the wait."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from actuator.audit import AuditLog
from actuator.demand.wait_socket import hung_up, parse_wait, serve_wait
from actuator.demand.waitlist import WaitList
from actuator.store import Store
from exporter.nvml_reader import GpuProcessReading, GpuReading, NvmlReading

GIB = 1 << 30
NODE = "n1"


class _Node:
    """The node's GPUs as the actuator reads them, each with the memory used on it and
    whether NVML lists the process that uses it; a test frees one by emptying it."""

    def __init__(self, *used: int, listed: bool = True) -> None:
        self.used, self.listed = list(used), listed

    def reading(self, _not_before: float) -> NvmlReading:
        gpus = tuple(
            GpuReading(i, f"GPU-{i}", "H100", 80 * GIB, used, 0.0, True, self._holders(i, used))
            for i, used in enumerate(self.used)
        )
        return NvmlReading(True, gpus=gpus)

    def _holders(self, index: int, used: int) -> tuple[GpuProcessReading, ...]:
        return (GpuProcessReading(4000 + index, used, 0.0),) if used and self.listed else ()


@pytest.fixture
def parts(tmp_path: Path) -> tuple[Store, AuditLog]:
    store = Store(tmp_path / "db")
    store.init()
    return store, AuditLog(tmp_path / "audit.jsonl")


def _serve(
    waitlist: WaitList, audit: AuditLog, request: dict[str, Any]
) -> tuple[socket.socket, threading.Thread]:
    """The server half in a thread, as the keep socket runs it; the caller is this process."""
    ours, theirs = socket.socketpair()
    caller = (os.getpid(), os.getuid(), os.getgid())

    def server() -> None:
        with theirs:
            serve_wait(theirs, waitlist, audit, caller, request, poll=0.02)

    thread = threading.Thread(target=server, daemon=True)
    thread.start()
    ours.settimeout(10)
    return ours, thread


def _answers(conn: socket.socket) -> list[dict[str, Any]]:
    return [json.loads(line) for line in conn.makefile().read().splitlines()]


def _events(audit: AuditLog) -> list[str]:
    return [r["event"] for r in audit.tail()]


@pytest.mark.parametrize(
    "request_",
    [
        {"gpus": 0},
        {"gpus": 1, "memory": 5},
        {"gpus": 99},
        {"gpus": "x"},
        {"gpus": [1]},
        {"gpus": 1, "seconds": 1e9},
        {"gpus": 1, "seconds": -5},
        {"memory": -1},
    ],
)
def test_a_request_that_makes_no_sense_is_refused_and_queues_nothing(
    request_: dict[str, Any], parts: tuple[Store, AuditLog]
) -> None:
    assert isinstance(parse_wait(request_), str)
    store, audit = parts
    conn, thread = _serve(WaitList(store, NODE, _Node(0).reading, lambda: 100.0), audit, request_)
    (answer,) = _answers(conn)
    thread.join(10)
    assert answer["ok"] is False and answer["error"], answer
    assert store.waiters(NODE, 100.0) == [] and _events(audit) == []


def test_a_sensible_request_is_read_with_defaults() -> None:
    assert parse_wait({"gpus": 2}) == (2, 0, 86400.0)
    assert parse_wait({"memory": 8 * GIB, "seconds": "60"}) == (0, 8 * GIB, 60.0)


def test_a_waiter_is_told_its_place_then_given_the_gpu_that_frees(
    parts: tuple[Store, AuditLog],
) -> None:
    store, audit = parts
    node = _Node(70 * GIB)  # the only GPU is taken
    conn, thread = _serve(WaitList(store, NODE, node.reading, lambda: 100.0), audit, {"gpus": 1})
    first = json.loads(conn.makefile().readline())
    assert first == {"ok": True, "queued": first["queued"], "position": 1, "node": NODE}
    assert [w.id for w in store.waiters(NODE, 100.0)] == [first["queued"]]
    node.used[0] = 0  # its job ended
    (given,) = _answers(conn)
    thread.join(10)
    assert given["ok"] is True and [g["uuid"] for g in given["gpus"]] == ["GPU-0"], given
    (served,) = store.promised(NODE, 0.0)
    assert (served.id, served.given) == (first["queued"], ("GPU-0",))
    assert _events(audit) == ["wait", "wait_served"]


def test_a_waiter_whose_time_is_up_is_told_so_and_leaves_the_list(
    parts: tuple[Store, AuditLog],
) -> None:
    store, audit = parts
    waitlist = WaitList(store, NODE, _Node(70 * GIB).reading, lambda: 100.0)
    conn, thread = _serve(waitlist, audit, {"gpus": 1, "seconds": 0.2})
    queued, expired = _answers(conn)
    thread.join(10)
    assert queued["ok"] and expired["ok"] is False
    assert expired["error"] == (
        "no GPU was free within 200ms: 1 of 1 GPUs held by processes the actuator did not "
        "reclaim (working, kept or protected, or demand is not enabled for them)"
    )
    assert store.waiters(NODE, 100.0) == [] and store.promised(NODE, 0.0) == []


def test_a_caller_that_hangs_up_leaves_the_list(parts: tuple[Store, AuditLog]) -> None:
    store, audit = parts
    waitlist = WaitList(store, NODE, _Node(70 * GIB).reading, lambda: 100.0)
    conn, thread = _serve(waitlist, audit, {"gpus": 1})
    assert json.loads(conn.makefile().readline())["position"] == 1
    conn.close()
    thread.join(10)
    assert not thread.is_alive()
    assert store.waiters(NODE, 100.0) == [] and store.promised(NODE, 0.0) == []


def test_hung_up_tells_a_closed_peer_from_a_quiet_one() -> None:
    ours, theirs = socket.socketpair()
    assert not hung_up(theirs)  # connected, nothing said
    ours.sendall(b"x")
    assert not hung_up(theirs)  # something to read is not a hang-up
    assert theirs.recv(1) == b"x"
    ours.close()
    assert hung_up(theirs)
    theirs.close()


def test_no_wait_without_its_audit_record(tmp_path: Path, parts: tuple[Store, AuditLog]) -> None:
    store, _ = parts
    (tmp_path / "not-a-directory").write_text("")
    audit = AuditLog(tmp_path / "not-a-directory" / "audit.jsonl")
    waitlist = WaitList(store, NODE, _Node(0).reading, lambda: 100.0)
    conn, thread = _serve(waitlist, audit, {"gpus": 1})
    (answer,) = _answers(conn)
    thread.join(10)
    assert answer["ok"] is False and answer["why"] == "audit_unavailable", answer
    assert store.waiters(NODE, 100.0) == []


def test_a_gpu_whose_memory_someone_unlisted_holds_is_not_given_away(
    parts: tuple[Store, AuditLog],
) -> None:
    """70 GiB used and no process listed (a process in another container, a context leaked
    on exit): the GPU is not empty, and a waiter for a whole GPU keeps waiting."""
    store, audit = parts
    waitlist = WaitList(store, NODE, _Node(70 * GIB, listed=False).reading, lambda: 100.0)
    conn, thread = _serve(waitlist, audit, {"gpus": 1, "seconds": 0.3})
    queued, expired = _answers(conn)
    thread.join(10)
    assert queued["ok"] and expired["ok"] is False, expired
    assert store.promised(NODE, 0.0) == []


@pytest.mark.parametrize(
    ("request_", "said"),
    [
        ({"gpus": 3}, "n1 has 2 GPUs, not 3"),
        ({"memory": 96 * GIB}, "no GPU on n1 has 96.0 GiB: the largest has 80.0 GiB"),
    ],
)
def test_a_request_this_node_can_never_meet_is_refused_at_once(
    request_: dict[str, Any], said: str, parts: tuple[Store, AuditLog]
) -> None:
    """Not after --for (24 h by default) of waiting: at once, naming what the node has."""
    store, audit = parts
    waitlist = WaitList(store, NODE, _Node(0, 0).reading, lambda: 100.0)
    conn, thread = _serve(waitlist, audit, request_)
    (answer,) = _answers(conn)
    thread.join(10)
    assert answer == {"ok": False, "error": said, "why": "never_met"}
    assert store.waiters(NODE, 100.0) == [] and _events(audit) == []


def test_a_node_whose_gpus_nvml_cannot_read_lets_the_request_wait(
    parts: tuple[Store, AuditLog],
) -> None:
    """Unknown is not impossible: the request waits and is asked again."""
    store, _ = parts
    down = WaitList(store, NODE, lambda _: NvmlReading(False), lambda: 100.0)
    assert down.never_met(64, 0) is None
    assert down.unserved_because() == "NVML could not say which GPUs are free"
