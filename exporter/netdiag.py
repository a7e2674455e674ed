"""TCP sockets as the kernel lists them: sock_diag (inet_diag) dumps, one per network
namespace and pass, the requests encoded by pyroute2's message classes. Only the sockets a
pass asks for are decoded (the inode is read from its fixed place first), and only the
fields network evidence needs, at their fixed places in the kernel's ABI; pyroute2's full
decode is the reference the tests hold them to.

A dump answers for the namespace its netlink socket was opened in. For a namespace other
than the exporter's own, the socket is opened by a short-lived thread that enters the
namespace (setns acts on the calling thread only) and then ends; the socket stays in that
namespace and is kept while the namespace is seen. Entering needs CAP_SYS_ADMIN: without
it, the namespace's sockets are unknown, never "none".
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
from dataclasses import dataclass
from ipaddress import ip_address

from pyroute2.netlink import (
    NETLINK_SOCK_DIAG,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
)
from pyroute2.netlink.diag import (
    SOCK_DIAG_BY_FAMILY,
    SS_CLOSE,
    SS_LISTEN,
    SS_MAX,
    SS_SYN_RECV,
    SS_TIME_WAIT,
    inet_diag_req,
)

from exporter.netns_counters import NamespaceCounters, read_counters

CLONE_NEWNET = 0x40000000
INET_DIAG_INFO = 2  # the tcp_info extension (bit INET_DIAG_INFO - 1 of idiag_ext)
# Sockets an inode can name: TIME_WAIT and SYN_RECV entries belong to no open file.
_STATES = ((1 << SS_MAX) - 1) & ~((1 << SS_TIME_WAIT) | (1 << SS_SYN_RECV) | (1 << SS_CLOSE))
_RECV = 1 << 16
# A dump that would decode more of the asked sockets than this is not believed (and not
# read on). Only the asked sockets count: another user's flood of sockets in the same
# namespace is walked past (the kernel's list, about a microsecond each), never a reason to
# call this tree's evidence unknown.
_MAX_WANTED = 200_000


class SocketsUnknown(Exception):
    """A tree's sockets could not be read. `reason` is the exported label value:
    `no_permission` (its open files or namespace refused), `gone` (the process or its
    namespace ended), `error` (the kernel's list failed); the message says more."""

    def __init__(self, detail: str, reason: str = "error") -> None:
        super().__init__(detail)
        self.reason = reason

    @classmethod
    def from_os_error(cls, what: str, exc: OSError) -> SocketsUnknown:
        refused = isinstance(exc, PermissionError)
        gone = isinstance(exc, FileNotFoundError | ProcessLookupError)
        reason = "no_permission" if refused else "gone" if gone else "error"
        return cls(f"{what}: {exc.strerror or exc}", reason)


@dataclass(frozen=True)
class TcpSocket:
    inode: int
    listening: bool
    loopback: bool  # bound to a loopback address: reachable from this host only
    port: int  # the local port
    moved: int  # bytes received plus bytes sent and acknowledged, since it opened
    # Milliseconds since data last went either way (None for a listener).
    data_ms_ago: int | None


def namespace_of(pid: int, proc_root: str = "/proc") -> int:
    """The network namespace's inode number (raises OSError: gone, or no permission)."""
    return os.stat(f"{proc_root}/{pid}/ns/net").st_ino


def _is_loopback(address: str) -> bool:
    try:
        ip = ip_address(address)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool((mapped or ip).is_loopback)


def dump(sock: socket.socket, wanted: set[int] | None = None) -> dict[int, TcpSocket]:
    """The TCP sockets (IPv4 and IPv6) of the socket's namespace, by inode: every one, or
    only those in `wanted` (the others are never decoded)."""
    found: dict[int, TcpSocket] = {}
    for request in _REQUESTS:
        try:
            sock.send(request)
            _read_dump(sock, found, wanted)
        except OSError as exc:
            raise SocketsUnknown(f"the kernel's socket list failed: {exc}") from None
    return found


def _request(seq: int, family: int) -> bytes:
    req = inet_diag_req()
    req["header"]["type"] = SOCK_DIAG_BY_FAMILY
    req["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
    req["header"]["sequence_number"] = seq
    req["sdiag_family"] = family
    req["sdiag_protocol"] = socket.IPPROTO_TCP
    req["idiag_states"] = _STATES
    req["idiag_ext"] = 1 << (INET_DIAG_INFO - 1)
    req.encode()
    return bytes(req.data)


_REQUESTS = (_request(1, socket.AF_INET), _request(2, socket.AF_INET6))
_HEADER = struct.Struct("=IH")  # nlmsghdr: length, type (then flags, seq, pid)
_INODE = struct.Struct("=I")
# inet_diag_msg's idiag_inode: after the 16-byte netlink header, 4 bytes of family, state,
# timer and retransmits, the 48-byte socket id, then expires, rqueue, wqueue and uid.
_INODE_AT = 16 + 4 + 48 + 16


_MSG_END = 16 + 72  # the netlink header and inet_diag_msg; attributes follow
_NLA = struct.Struct("=HH")
_PORT = struct.Struct(">H")
# struct tcp_info (linux/tcp.h, only ever appended to): the fields network evidence reads.
_LAST_DATA = struct.Struct("=I4xI")  # tcpi_last_data_sent (44), tcpi_last_data_recv (52)
_BYTES = struct.Struct("=QQ")  # tcpi_bytes_acked (120), tcpi_bytes_received (128)


def fast_decode(data: bytes, offset: int, length: int, inode: int) -> TcpSocket:
    """One inet_diag answer's fields at their fixed places (the kernel's ABI, as `ss` reads
    it): pyroute2's full decode costs about 60 microseconds a socket, this a few; the two
    agree on every socket (tests/exporter/test_netactivity.py)."""
    base = offset + 16
    family, state = data[base], data[base + 1]
    (port,) = _PORT.unpack_from(data, base + 4)
    src = data[base + 8 : base + 8 + (4 if family == socket.AF_INET else 16)]
    listening = state == SS_LISTEN
    moved, ago = 0, None
    at, end = offset + _MSG_END, offset + length
    while at + _NLA.size <= end:
        size, kind = _NLA.unpack_from(data, at)
        if size < _NLA.size:
            break
        if kind == INET_DIAG_INFO and not listening:
            info = at + _NLA.size
            payload = size - _NLA.size
            if payload >= 56:
                sent, received = _LAST_DATA.unpack_from(data, info + 44)
                ago = min(sent, received)
            if payload >= 136:
                acked, got = _BYTES.unpack_from(data, info + 120)
                moved = acked + got
        at += (size + 3) & ~3
    return TcpSocket(
        inode=inode,
        listening=listening,
        loopback=_is_loopback_bytes(family, src),
        port=port,
        moved=moved,
        data_ms_ago=ago,
    )


def _is_loopback_bytes(family: int, raw: bytes) -> bool:
    try:
        return _is_loopback(socket.inet_ntop(family, raw))
    except (OSError, ValueError):
        return False


def _read_dump(sock: socket.socket, found: dict[int, TcpSocket], wanted: set[int] | None) -> None:
    seen = 0
    while True:
        data = sock.recv(_RECV)
        if not data:
            raise SocketsUnknown("the kernel's socket list ended early")
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind = _HEADER.unpack_from(data, offset)
            if length < _HEADER.size or offset + length > len(data):
                raise SocketsUnknown("a malformed answer from the kernel's socket list")
            if kind == NLMSG_DONE:
                return
            if kind == NLMSG_ERROR:
                raise SocketsUnknown("the kernel refused the socket list")
            if length >= _MSG_END:
                (inode,) = _INODE.unpack_from(data, offset + _INODE_AT)
                if inode and (wanted is None or inode in wanted):
                    seen += 1
                    if seen > _MAX_WANTED:
                        raise SocketsUnknown(f"more than {_MAX_WANTED} sockets asked in one dump")
                    found[inode] = fast_decode(data, offset, length, inode)
            offset += (length + 3) & ~3  # NLMSG_ALIGN


def _diag_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    sock.settimeout(2.0)  # the kernel answers at once; never block a scrape for ever
    return sock


def open_in_namespace(pid: int, proc_root: str = "/proc") -> socket.socket:
    """A sock_diag socket inside `pid`'s network namespace (raises SocketsUnknown)."""
    result: list[socket.socket | SocketsUnknown] = []

    def enter_and_open() -> None:  # this thread ends in the other namespace: nothing leaks
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(f"{proc_root}/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            result.append(SocketsUnknown.from_os_error("cannot open its network namespace", exc))
            return
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                refused = OSError(errno, os.strerror(errno))
                if errno in (1, 13):  # EPERM, EACCES: no CAP_SYS_ADMIN
                    refused = PermissionError(errno, os.strerror(errno))
                result.append(
                    SocketsUnknown.from_os_error("cannot enter its network namespace", refused)
                )
                return
        finally:
            os.close(fd)
        result.append(_diag_socket())

    thread = threading.Thread(target=enter_and_open, name="netns-open", daemon=True)
    thread.start()
    thread.join()
    got = result[0] if result else SocketsUnknown("the namespace thread failed")
    if isinstance(got, SocketsUnknown):
        raise got
    return got


class SocketTables:
    """The TCP sockets of each network namespace, dumped at most once per pass for the
    inodes asked: a namespace already dumped for other inodes is dumped again for the
    union, so an answer never lacks a socket it was asked for."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self._own = os.stat("/proc/thread-self/ns/net").st_ino
        self._sockets: dict[int, socket.socket] = {}
        # namespace -> (the inodes its dump was asked for, None: all; the dump or why not)
        self._tables: dict[
            int, tuple[frozenset[int] | None, dict[int, TcpSocket] | SocketsUnknown]
        ] = {}
        # namespace -> its own TCP counters, read at most once per pass (None: unreadable)
        self._counters: dict[int, NamespaceCounters | None] = {}
        self._lock = threading.Lock()
        self.dumps = 0  # for tests and benchmarks

    def begin(self) -> None:
        """A new pass: every namespace is dumped afresh when next asked for."""
        with self._lock:
            self._tables = {}
            self._counters = {}

    def end(self) -> None:
        """Close the sockets of namespaces this pass did not ask for."""
        with self._lock:
            for ns in set(self._sockets) - set(self._tables):
                self._sockets.pop(ns).close()

    def close(self) -> None:
        with self._lock:
            for sock in self._sockets.values():
                sock.close()
            self._sockets = {}

    def of(self, pid: int, wanted: set[int] | None = None) -> dict[int, TcpSocket]:
        """The sockets of `pid`'s network namespace (raises SocketsUnknown): every one, or
        at least those in `wanted` (a pass over many trees asks for all of theirs at once)."""
        try:
            ns = namespace_of(pid, self.proc_root)
        except OSError as exc:
            raise SocketsUnknown.from_os_error("cannot see its network namespace", exc) from None
        with self._lock:
            cached = self._tables.get(ns)
            if cached is None or not _covers(cached[0], wanted):
                asked = None if wanted is None else frozenset(wanted)
                if cached is not None and asked is not None and cached[0] is not None:
                    asked |= cached[0]
                cached = self._tables[ns] = (asked, self._dump(ns, pid, asked))
        table = cached[1]
        if isinstance(table, SocketsUnknown):
            raise table
        return table

    def counters(self, pid: int) -> tuple[int, NamespaceCounters] | None:
        """The TCP counters of `pid`'s network namespace with its inode, read once per pass;
        None in the exporter's own namespace (the host's, every user's traffic) or where
        they cannot be read (exporter/netns_counters.py)."""
        try:
            ns = namespace_of(pid, self.proc_root)
        except OSError:
            return None
        if ns == self._own:
            return None
        with self._lock:
            if ns not in self._counters:
                self._counters[ns] = read_counters(pid, self.proc_root)
            found = self._counters[ns]
        return None if found is None else (ns, found)

    def _dump(
        self, ns: int, pid: int, wanted: frozenset[int] | None
    ) -> dict[int, TcpSocket] | SocketsUnknown:
        try:
            sock = self._sockets.get(ns)
            if sock is None:
                sock = _diag_socket() if ns == self._own else open_in_namespace(pid, self.proc_root)
                self._sockets[ns] = sock
            self.dumps += 1
            return dump(sock, None if wanted is None else set(wanted))
        except SocketsUnknown as exc:
            broken = self._sockets.pop(ns, None)
            if broken is not None:
                broken.close()
            return exc


def _covers(asked: frozenset[int] | None, wanted: set[int] | None) -> bool:
    if asked is None:
        return True  # a whole dump answers for everything
    return wanted is not None and wanted <= asked
