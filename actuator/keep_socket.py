"""`gpu-reclaimer keep PID --for 2h` on the node: the owner proves who they are by being the
process's uid. The actuator listens on a unix socket anyone may connect to and reads the
caller's credentials from the kernel (SO_PEERCRED), never from the request: a caller acts
only on processes of their own uid; root and members of `server.keep_socket_groups` on any.

Protocol: one JSON line each way, `{"pid": 4242, "action": "keep", "seconds": 7200}` (or
`"action": "release"`) -> `{"ok": true, "case": 7, "state": "snoozed", "until": ...}`.

One worker serves the socket at a time (it holds a flock next to it; the others retry), so
every worker can take over when the serving one exits. It serves many peers at once: each
connection has its own thread and a whole-request deadline (a peer trickling one byte at a
time is cut off), and each uid at most PER_UID connections at a time, so a slow or hostile
local user never delays another user's `keep` while the grace runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import logging
import os
import pwd
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actuator import owner_actions
from actuator.audit_records import KeepSocketAsked
from actuator.demand.wait_socket import queue, serve_wait
from actuator.demand.waitlist import WaitList
from actuator.models import LIVE_STATES, Case, State
from actuator.operations import Refused
from actuator.owner_actions import Kept, Owner, Process, Released
from actuator.policy import Effective
from actuator.runtime import Runtime
from exporter import procfs

log = logging.getLogger(__name__)
MAX_REQUEST = 4096
MAX_ANSWER = 2**20  # a list of keeps can be long
RETRY_S = 5.0
REQUEST_DEADLINE_S = 2.0  # the whole request line, however it trickles in
PER_UID = 4  # connections served at once for one uid; more are refused at once
WAITS_PER_UID = 64  # `gpu-reclaimer wait` connections stay open: counted apart
MAX_CONNECTIONS = 64  # for all uids together (fairly: see _dispatch)


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, as the kernel recorded it."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def in_groups(uid: int, gid: int, groups: tuple[str, ...]) -> bool:
    if not groups:
        return False
    try:
        name = pwd.getpwuid(uid).pw_name
        member_of = {grp.getgrgid(g).gr_name for g in os.getgrouplist(name, gid)}
    except (KeyError, OSError):
        return False
    return bool(member_of & set(groups))


@dataclass(eq=False)
class _Peer:
    """One connection being served: whose, since when, and whether its request is in."""

    uid: int
    since: float
    conn: socket.socket
    reading: bool = True
    evicted: bool = False


class KeepSocket:
    def __init__(
        self,
        rt: Runtime,
        path: str,
        *,
        sre_groups: tuple[str, ...] = (),
        max_seconds: float = 86400.0,
        node: str = "",
        waitlist: WaitList | None = None,
        rule_for: Callable[[int], Effective | None] | None = None,
    ) -> None:
        """`rule_for`: the rule the node's facts select for a PID (a keep asked before
        its case opens is bounded by it; without one, such a keep is refused)."""
        self.rt, self.path, self.waitlist = rt, Path(path), waitlist
        self.rule_for = rule_for
        self.sre_groups, self.max_seconds, self.node = sre_groups, max_seconds, node
        self._sock: socket.socket | None = None
        self._active: dict[int, int] = {}  # uid -> connections being served
        self._peers: set[_Peer] = set()  # every connection being served, quick requests
        self._waits: dict[int, int] = {}  # uid -> `wait` connections held open
        self._active_lock = threading.Lock()

    # -- serving ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Serve while this worker holds the lock; otherwise retry now and then."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            while not stop.is_set():
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    stop.wait(RETRY_S)
                    continue
                self._serve(stop)
        finally:
            os.close(lock)

    def _serve(self, stop: threading.Event) -> None:
        self.path.unlink(missing_ok=True)  # a stale socket of a dead holder
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, 0o666)  # anyone connects; the kernel says who they are
        sock.listen(128)
        sock.settimeout(0.5)
        self._sock = sock
        log.info("keep socket listening on %s", self.path)
        try:
            while not stop.is_set():
                try:
                    conn, _ = sock.accept()
                except TimeoutError:
                    continue
                self._dispatch(conn)
        finally:
            sock.close()
            self.path.unlink(missing_ok=True)

    def _dispatch(self, conn: socket.socket) -> None:
        """Serve the connection in its own thread, within its uid's share. The connections
        of all uids together are capped too, but fairly: at the cap, a newcomer takes the
        place of the oldest connection of another uid that has not yet sent its request
        (a real client sends it at once; only a flood holds a slot silently), so no uid's
        connections, however many uids a flood spreads over, refuse another uid's request."""
        try:
            caller = peer_credentials(conn)
        except OSError:
            conn.close()
            return
        uid = caller[1]
        peer = _Peer(uid, time.monotonic(), conn)
        evicted: _Peer | None = None
        with self._active_lock:
            busy = self._active.get(uid, 0) >= PER_UID
            if not busy and len(self._peers) >= MAX_CONNECTIONS:
                evicted = self._oldest_silent_peer(other_than=uid)
                busy = evicted is None
            if not busy:
                self._active[uid] = self._active.get(uid, 0) + 1
                self._peers.add(peer)
        if evicted is not None:
            with contextlib.suppress(OSError):
                evicted.conn.shutdown(socket.SHUT_RDWR)  # its read ends now; its thread exits
        if busy:
            with conn, contextlib.suppress(OSError):
                conn.setblocking(False)
                conn.send(b'{"ok": false, "error": "busy: too many requests from uid %d"}\n' % uid)
            return
        try:
            threading.Thread(
                target=self._serve_one, args=(peer, caller), daemon=True, name=f"keep-uid-{uid}"
            ).start()
        except RuntimeError:  # no thread to be had (held waits of many uids): refuse this one
            with self._active_lock:
                self._peers.discard(peer)
                self._active[uid] -= 1
                if not self._active[uid]:
                    del self._active[uid]
            with conn, contextlib.suppress(OSError):
                conn.setblocking(False)
                conn.send(b'{"ok": false, "error": "busy: no thread free, retry"}\n')

    def _oldest_silent_peer(self, other_than: int) -> _Peer | None:
        """The oldest connection of another uid still without a whole request (locked)."""
        silent = [p for p in self._peers if p.reading and p.uid != other_than and not p.evicted]
        if not silent:
            return None
        oldest = min(silent, key=lambda p: p.since)
        oldest.evicted = True
        return oldest

    def _serve_one(self, peer: _Peer, caller: tuple[int, int, int]) -> None:
        try:
            with peer.conn:
                self._handle(peer, caller)
        finally:
            with self._active_lock:
                self._peers.discard(peer)
                self._active[caller[1]] -= 1
                if not self._active[caller[1]]:
                    del self._active[caller[1]]

    def _handle(self, peer: _Peer, caller: tuple[int, int, int]) -> None:
        conn = peer.conn
        try:
            raw = read_line(conn, time.monotonic() + REQUEST_DEADLINE_S)
            peer.reading = False
            if peer.evicted:
                return  # its place went to another uid's request
            waiting = self._wait_request(raw)
            if waiting is not None and self.waitlist is not None:
                self._held_wait(peer, caller, waiting)
                return
            answer = self.answer(caller, raw)
        except (OSError, ValueError) as exc:
            answer = {"ok": False, "error": f"bad request: {exc}"}
        with contextlib.suppress(OSError):
            conn.settimeout(REQUEST_DEADLINE_S)
            conn.sendall(json.dumps(answer).encode() + b"\n")

    def _held_wait(
        self, peer: _Peer, caller: tuple[int, int, int], request: dict[str, Any]
    ) -> None:
        """A wait holds its connection for as long as it waits: it leaves the uid's share of
        quick requests and counts against WAITS_PER_UID instead."""
        uid, conn = caller[1], peer.conn
        with self._active_lock:
            full = self._waits.get(uid, 0) >= WAITS_PER_UID
            if not full:
                self._waits[uid] = self._waits.get(uid, 0) + 1
                self._active[uid] -= 1
                self._peers.discard(peer)  # a held wait is not a quick request
        if full:
            with contextlib.suppress(OSError):
                conn.sendall(b'{"ok": false, "error": "too many waits for this uid"}\n')
            return
        try:
            assert self.waitlist is not None
            with contextlib.suppress(OSError):  # the caller hung up: nothing to tell
                serve_wait(conn, self.waitlist, self.rt.audit, caller, request)
        finally:
            with self._active_lock:
                self._waits[uid] -= 1
                if not self._waits[uid]:
                    del self._waits[uid]
                self._active[uid] = self._active.get(uid, 0) + 1
                self._peers.add(peer)

    def _keeps(self, uid: int | None, pid: int) -> list[dict[str, Any]]:
        """Every keep on this node (of `uid` only, when given; of `pid` only, when not 0):
        those asked in advance, and those of open cases (a case kept is snoozed)."""
        now = self.rt.clock()
        found: list[dict[str, Any]] = [
            {"pid": k.pid, "uid": k.uid, "until": k.until, "by": k.by, "case": None}
            for k in self.rt.store.list_keeps(self.node, now, uid)
        ]
        for case in self.rt.store.list_cases(state=str(State.SNOOZED), node=self.node, limit=1000):
            if case.snoozed_until is None or case.snoozed_until <= now:
                continue
            if uid is not None and case.uid != uid:
                continue
            found.append(
                {"pid": case.pid, "uid": case.uid, "until": case.snoozed_until, "case": case.id}
            )
        return sorted(
            (k for k in found if pid in (0, k["pid"])), key=lambda k: (k["until"], k["pid"])
        )

    @staticmethod
    def _wait_request(raw: bytes) -> dict[str, Any] | None:
        """The request, when it is `gpu-reclaimer wait` (served by demand/wait_socket.py)."""
        with contextlib.suppress(ValueError):
            request = json.loads(raw)
            if isinstance(request, dict) and request.get("action") == "wait":
                return request
        return None

    # -- deciding ---------------------------------------------------------------------------

    def answer(self, caller: tuple[int, int, int], raw: bytes) -> dict[str, Any]:
        _, uid, gid = caller
        try:
            request = json.loads(raw)
            action = str(request["action"])
            pid = int(request.get("pid") or 0)
            seconds = float(request.get("seconds", 0))
        except (ValueError, KeyError, TypeError):
            return {"ok": False, "error": 'send {"pid": N, "action": "keep", "seconds": S}'}
        if action in ("waiters", "wait"):
            if self.waitlist is None:
                return {
                    "ok": False,
                    "error": "no wait list on this node: the actuator here "
                    "acts through agents, or runs elsewhere",
                }
            return queue(self.waitlist)
        if action not in ("keep", "release", "list", "revoke"):
            return {"ok": False, "error": "action is keep, release, list or revoke"}
        privileged = uid == 0 or in_groups(uid, gid, self.sre_groups)
        if action == "list":
            return {"ok": True, "keeps": self._keeps(None if privileged else uid, pid)}
        status = procfs.read_status(pid)  # the one reader of a process's ids
        stat = procfs.read_stat(pid)
        owner = status.uid if status is not None else None
        if owner is None or stat is None:
            return {"ok": False, "error": f"no process {pid} on this node"}
        if not (uid == owner or privileged):
            self._audit(uid, pid, action, None, "refused: not the owner")
            return {"ok": False, "error": f"process {pid} is not yours (uid {owner})"}
        asking = Owner(f"uid {uid} on the node (peer credentials)", privileged)
        process = Process(self.node, pid, stat.start_ticks, procfs.boot_id(), owner)
        case = self._live_case(pid)
        case_id = case.id if case is not None else None
        result: Kept | Released | Refused
        if action == "revoke":
            result = owner_actions.revoke(self.rt, asking, process)
        elif action == "release":
            result = owner_actions.release(self.rt, asking, case=case, process=process)
        else:
            rule_for = self.rule_for
            result = owner_actions.keep(
                self.rt,
                asking,
                seconds,
                case=case,
                process=process,
                selected=(lambda: rule_for(pid)) if rule_for is not None else lambda: None,
                site_max=self.max_seconds,
            )
        if isinstance(result, Refused):
            self._audit(uid, pid, action, case_id, f"refused: {result.detail}")
            return {"ok": False, "error": result.detail, "why": str(result.why)}
        self._audit(uid, pid, action, case_id, "accepted")
        if isinstance(result, Kept):
            return {"ok": True, "case": result.case, "state": result.state, "until": result.until}
        answer: dict[str, Any] = {"ok": True, "case": result.case, "state": result.state}
        if action == "revoke":
            return answer | {"revoked": True, "pid": pid}
        return answer | {"released": True, "revoked_keep": result.revoked_keep}

    def _live_case(self, pid: int) -> Case | None:
        for case in self.rt.store.list_cases(pid=pid, limit=20):
            if case.state in LIVE_STATES and (not self.node or case.node == self.node):
                return case  # the snooze itself says when it is too late
        return None

    def _audit(self, uid: int, pid: int, action: str, case_id: int | None, result: str) -> None:
        with contextlib.suppress(Exception):
            self.rt.audit.write(
                KeepSocketAsked(uid=uid, pid=pid, action=action, case=case_id, result=result)
            )


def read_line(conn: socket.socket, deadline: float) -> bytes:
    """One request line by `deadline` (monotonic), at most MAX_REQUEST bytes; a peer that
    has not sent it by then gets TimeoutError, however it trickles."""
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no whole request within {REQUEST_DEADLINE_S:g}s")
        conn.settimeout(left)
        chunk = conn.recv(MAX_REQUEST - len(data))
        if not chunk:
            break
        data += chunk
        if len(data) >= MAX_REQUEST:
            raise ValueError(f"request longer than {MAX_REQUEST} bytes")
    return data.split(b"\n", 1)[0]


def request_keep(
    path: str, pid: int, action: str, seconds: float = 0.0, timeout: float = 10.0
) -> dict[str, Any]:
    """The client side (`gpu-reclaimer keep`)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(
            json.dumps({"pid": pid, "action": action, "seconds": seconds}).encode() + b"\n"
        )
        answer = json.loads(sock.makefile("rb").readline(MAX_ANSWER) or b"null")
    if not isinstance(answer, dict):
        raise ValueError("the socket did not answer as the actuator does (not its JSON)")
    return answer
