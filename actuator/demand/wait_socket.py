"""`gpu-reclaimer wait` on the keep socket: the caller (proven by SO_PEERCRED) joins the
node's wait list and the connection stays open until it is given GPUs, its time is up, or it
hangs up. Protocol: one JSON line in, `{"action": "wait", "gpus": 1, "memory": 0,
"seconds": 7200}`; one line out at once (`{"ok": true, "queued": 7, "position": 2}`), one
more at the end (`{"ok": true, "gpus": [{"index": 3, "uuid": ...}]}` or an error)."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from typing import Any

from actuator.audit import AuditError, AuditLog
from actuator.audit_records import WaitJoined, WaitServed
from actuator.demand.model import MAX_GPUS_PER_NODE
from actuator.demand.waitlist import WaitList, user_name
from actuator.store.waiters import EXPIRED, LEFT, SERVED
from exporter import procfs
from exporter.units import format_duration

POLL_S = 0.5  # how often a waiter looks for free GPUs (and notices a hang-up)
MAX_WAIT_S = 7 * 86400.0
DEFAULT_WAIT_S = 86400.0


def _send(conn: socket.socket, answer: dict[str, Any]) -> None:
    conn.sendall(json.dumps(answer).encode() + b"\n")


def hung_up(conn: socket.socket) -> bool:
    """The peer closed its end (readable with nothing to read)."""
    readable, _, _ = select.select([conn], [], [], 0)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def parse_wait(request: dict[str, Any]) -> tuple[int, int, float] | str:
    """(gpus, memory bytes, seconds), or what is wrong with the request."""
    try:
        gpus = int(request.get("gpus") or 0)
        memory = int(request.get("memory") or 0)
        seconds = float(request.get("seconds") or DEFAULT_WAIT_S)
    except (TypeError, ValueError):
        return "gpus, memory and seconds are numbers"
    if not 0 <= gpus <= MAX_GPUS_PER_NODE or memory < 0 or (gpus == 0) == (memory == 0):
        return f"wait for 1 to {MAX_GPUS_PER_NODE} whole GPUs, or for memory on one GPU"
    if not 0 < seconds <= MAX_WAIT_S:
        return f"wait for at most {format_duration(MAX_WAIT_S)}"
    return gpus, memory, seconds


def queue(waitlist: WaitList) -> dict[str, Any]:
    """The wait list, first come first (anyone on the node may read it)."""
    return {
        "ok": True,
        "waiters": [
            {
                "position": n,
                "id": w.id,
                "uid": w.uid,
                "user": user_name(w.uid),
                "gpus": w.gpus,
                "memory": w.memory_bytes,
                "since": w.created,
                "until": w.expires,
            }
            for n, w in enumerate(waitlist.pending(), 1)
        ],
    }


def serve_wait(
    conn: socket.socket,
    waitlist: WaitList,
    audit: AuditLog,
    caller: tuple[int, int, int],
    request: dict[str, Any],
    *,
    poll: float = POLL_S,
) -> None:
    pid, uid, _ = caller
    parsed = parse_wait(request)
    if isinstance(parsed, str):
        _send(conn, {"ok": False, "error": parsed})
        return
    gpus, memory, seconds = parsed
    impossible = waitlist.never_met(gpus, memory)
    if impossible is not None:  # said at once, not after --for of waiting
        _send(conn, {"ok": False, "error": impossible, "why": "never_met"})
        return
    ticks = procfs.start_ticks(pid)
    if ticks is None:
        _send(conn, {"ok": False, "error": "the caller's process cannot be read"})
        return
    store, now = waitlist.store, waitlist.clock()
    try:
        audit.write(WaitJoined(uid=uid, pid=pid, gpus=gpus, memory=memory, until=now + seconds))
    except AuditError as exc:
        _send(conn, {"ok": False, "error": str(exc), "why": "audit_unavailable"})
        return
    waiter = store.add_waiter(waitlist.node, uid, pid, ticks, gpus, memory, now, now + seconds)
    position = next((n for n, w in enumerate(waitlist.pending(), 1) if w.id == waiter), 1)
    _send(conn, {"ok": True, "queued": waiter, "position": position, "node": waitlist.node})
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if hung_up(conn):
                store.end_waiter(waiter, LEFT, waitlist.clock())
                return
            given = waitlist.offers().get(waiter)
            if given:
                uuids = tuple(g.uuid for g in given)
                if store.end_waiter(waiter, SERVED, waitlist.clock(), uuids):
                    with contextlib.suppress(AuditError):
                        audit.write(WaitServed(waiter=waiter, uid=uid, gpus=list(uuids)))
                    _send(
                        conn,
                        {"ok": True, "gpus": [g.to_json() for g in given], "node": waitlist.node},
                    )
                return
            time.sleep(poll)
        store.end_waiter(waiter, EXPIRED, waitlist.clock())
        why = waitlist.unserved_because()
        _send(
            conn,
            {
                "ok": False,
                "error": f"no GPU was free within {format_duration(seconds)}: {why}",
                "why": "expired",
            },
        )
    except BaseException:
        with contextlib.suppress(Exception):
            store.end_waiter(waiter, LEFT, waitlist.clock())
        raise
