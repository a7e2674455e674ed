"""Network evidence on real sockets: listeners, a download, an idle connection, a socket in
another network namespace, and a reader without permission."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyroute2.netlink.diag import SS_LISTEN, inet_diag_msg

from exporter import netdiag
from exporter.netactivity import NetworkMeter, socket_inodes
from exporter.netdiag import SocketsUnknown, SocketTables, TcpSocket, _diag_socket, dump
from tests.support import Children

LISTEN = """
import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
s.bind((sys.argv[1], 0)); s.listen()
print("ready", flush=True); print(s.getsockname()[1], flush=True); sys.stdin.read()
"""

# Connects to PORT and reads whatever comes, until stdin closes.
CLIENT = """
import socket, sys, threading
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
drain = lambda: [None for _ in iter(lambda: c.recv(65536), b"")]
threading.Thread(target=drain, daemon=True).start()
print("ready", flush=True); sys.stdin.read()
"""


class Feed:
    """A server on loopback that sends each accepted client `rate` bytes a `tick`."""

    def __init__(self, chunk: int, tick: float = 0.05) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.chunk, self.tick = chunk, tick
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            while not self.stop.wait(self.tick):
                if self.chunk:
                    conn.sendall(b"x" * self.chunk)

    def close(self) -> None:
        self.stop.set()
        self.server.close()


@pytest.fixture
def tables() -> Iterator[SocketTables]:
    found = SocketTables()
    yield found
    found.close()


def _meter(tables: SocketTables, floor: int = 4096) -> NetworkMeter:
    return NetworkMeter(tables, floor=floor, window=60.0)


def _read(meter: NetworkMeter, child: subprocess.Popen[str]):
    meter.tables.begin()
    try:
        return meter.read((child.pid, 0), [child.pid])
    finally:
        meter.tables.end()


def test_listeners_are_counted_by_scope(children: Children, tables: SocketTables) -> None:
    loopback = children.python(LISTEN, "127.0.0.1")
    anywhere = children.python(LISTEN, "0.0.0.0")
    meter = _meter(tables)
    near, far = _read(meter, loopback), _read(meter, anywhere)
    assert (near.listening_loopback, near.listening_external) == (1, 0)
    # bound to port 0 on every interface: the kernel's pick, as a rank's rendezvous is
    assert (far.listening_loopback, far.listening_external, far.listening_rendezvous) == (0, 0, 1)
    assert far.ports == frozenset({int(anywhere.stdout.readline())})  # type: ignore[union-attr]
    assert near.last_activity is None and near.connections == 0


@pytest.mark.reliability(65)
def test_a_download_is_data_moving(children: Children, tables: SocketTables) -> None:
    feed = Feed(chunk=64 * 1024)
    try:
        client = children.python(CLIENT, str(feed.port))
        meter = _meter(tables)
        first = _read(meter, client)
        time.sleep(0.5)
        second = _read(meter, client)
        assert first.connections == 1
        assert second.last_activity is not None
        assert second.last_activity == pytest.approx(time.time(), abs=1.0)
        time.sleep(0.5)
        third = _read(meter, client)
        assert third.last_activity is not None and third.last_activity > second.last_activity
    finally:
        feed.close()


def test_keepalive_below_the_floor_is_not_activity(
    children: Children, tables: SocketTables
) -> None:
    feed = Feed(chunk=16, tick=0.1)  # ~160 bytes a second: a ping
    try:
        client = children.python(CLIENT, str(feed.port))
        meter = _meter(tables, floor=4096)
        for _ in range(6):
            reading = _read(meter, client)
            time.sleep(0.3)
        assert reading.connections == 1
        assert reading.last_activity is None  # an open, pinged connection moves no work
    finally:
        feed.close()


def test_an_idle_connection_keeps_its_last_activity(
    children: Children, tables: SocketTables
) -> None:
    feed = Feed(chunk=64 * 1024)
    try:
        client = children.python(CLIENT, str(feed.port))
        meter = _meter(tables)
        _read(meter, client)
        time.sleep(0.3)
        moved = _read(meter, client).last_activity
        assert moved is not None
        feed.chunk = 0  # the connection stays open; nothing moves
        time.sleep(0.5)
        settled = _read(meter, client)  # whatever was in flight has landed
        time.sleep(0.5)
        quiet = _read(meter, client)
        assert quiet.connections == 1 and quiet.last_activity is not None
        assert quiet.last_activity == settled.last_activity  # kept, not advanced
        assert time.time() - quiet.last_activity >= 0.5
    finally:
        feed.close()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is missing")
@pytest.mark.skipif(os.geteuid() != 0, reason="entering a network namespace needs root")
def test_a_socket_in_another_network_namespace(children: Children, tables: SocketTables) -> None:
    inside = children.start(["unshare", "--net", sys.executable, "-c", LISTEN, "0.0.0.0"])
    # unshare execs python in place: the same pid, now in its own namespace
    assert os.readlink(f"/proc/{inside.pid}/ns/net") != os.readlink("/proc/self/ns/net")
    port = int(inside.stdout.readline())  # type: ignore[union-attr]
    own = SocketTables()
    try:
        own_sockets = own.of(os.getpid())
    finally:
        own.close()
    assert not [s for s in own_sockets.values() if s.listening and s.port == port]
    meter = _meter(tables)
    reading = _read(meter, inside)
    # bound to port 0: a rendezvous, counted in the namespace it lives in
    assert reading.listening_rendezvous == 1 and reading.ports == frozenset({port})


def test_a_process_gone_is_unknown(children: Children, tables: SocketTables) -> None:
    child = children.python(LISTEN, "127.0.0.1")
    child.kill()
    child.wait()
    with pytest.raises(SocketsUnknown) as gone:
        _read(_meter(tables), child)
    assert gone.value.reason == "gone"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a reader as another uid")
def test_a_reader_without_permission_says_unknown(children: Children) -> None:
    """The exporter run as `nobody` cannot read root's process: unknown, not "no network"."""
    target = children.python(LISTEN, "0.0.0.0")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the reader, as nobody
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                NetworkMeter(SocketTables()).read((target.pid, 0), [target.pid])
                said = "read"
            except SocketsUnknown as exc:
                said = f"unknown: {exc.reason}: {exc}"
            os.write(write_end, said.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    out = os.read(read_end, 4096).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    assert out.startswith("unknown: no_permission:") and "ermission" in out


def test_socket_inodes_are_the_processes_open_sockets(children: Children) -> None:
    child = children.python(LISTEN, "127.0.0.1")
    inodes = socket_inodes([child.pid])
    assert len(inodes) == 1
    own = SocketTables()
    try:
        table = own.of(child.pid)
    finally:
        own.close()
    (inode,) = inodes
    assert table[inode].listening and table[inode].loopback


def test_a_dump_decodes_only_the_sockets_asked_for(children: Children) -> None:
    """Many trees in one pass: one dump of the namespace, only their sockets decoded."""
    servers = [children.python(LISTEN, "127.0.0.1") for _ in range(3)]
    tables = SocketTables()
    try:
        mine = socket_inodes([servers[0].pid])
        everything = tables.of(servers[0].pid)
        assert mine <= set(everything) and len(everything) > len(mine)
        tables.begin()
        meter = NetworkMeter(tables)
        found = meter.read_many({(s.pid, 0): [s.pid] for s in servers[:2]})
        assert tables.dumps == 2  # the first `of` above, and one for the pass
        assert [r.listening_loopback for r in found.values()] == [1, 1]
        tables.end()
        with _diag_socket() as sock:
            assert set(dump(sock, mine)) == mine
    finally:
        tables.close()


def test_the_fast_decode_agrees_with_pyroute2_on_every_socket(children: Children) -> None:
    """Listeners on IPv4 and IPv6, loopback and not, and connections that moved data: the
    fields read at their fixed places equal pyroute2's full decode of the same answer."""
    children.python(LISTEN, "127.0.0.1")
    children.python(LISTEN, "0.0.0.0")
    children.python(LISTEN, "::1")
    feed = Feed(chunk=4096)
    try:
        children.python(CLIENT, str(feed.port))
        time.sleep(0.3)
        compared = 0
        with _diag_socket() as sock:
            for request in netdiag._REQUESTS:
                sock.send(request)
                done = False
                while not done:
                    data = sock.recv(1 << 16)
                    at = 0
                    while at < len(data):
                        length, kind = struct.unpack_from("=IH", data, at)
                        if kind == 3:  # NLMSG_DONE
                            done = True
                            break
                        raw = data[at : at + length]
                        ref = _reference_decode(raw)
                        if ref is not None:
                            assert netdiag.fast_decode(data, at, length, ref.inode) == ref
                            compared += 1
                        at += (length + 3) & ~3
        assert compared >= 5
    finally:
        feed.close()


def _reference_decode(raw: bytes) -> TcpSocket | None:
    """One inet_diag answer decoded whole by pyroute2: the reference `fast_decode` is held to."""
    msg: Any = inet_diag_msg(raw)
    msg.decode()
    get = msg.__getitem__
    inode = int(get("idiag_inode"))
    if inode == 0:
        return None
    listening = get("idiag_state") == SS_LISTEN
    info = msg.get_attr("INET_DIAG_INFO") or {}
    moved = int(info.get("tcpi_bytes_received", 0)) + int(info.get("tcpi_bytes_acked", 0))
    ago = None
    if not listening and info:
        ago = min(int(info.get("tcpi_last_data_sent", 0)), int(info.get("tcpi_last_data_recv", 0)))
    return TcpSocket(
        inode=inode,
        listening=listening,
        loopback=netdiag._is_loopback(str(get("idiag_src"))),
        port=int(get("idiag_sport")),
        moved=0 if listening else moved,
        data_ms_ago=ago,
    )


def test_a_namespace_dumped_for_one_tree_still_answers_for_another(children: Children) -> None:
    """A filtered dump never answers for sockets it was not asked for: asked for another
    tree's in the same pass, the namespace is dumped again for both (a socket missed would
    read as a tree with no listener and no data moving)."""
    first, second = (children.python(LISTEN, "127.0.0.1") for _ in range(2))
    mine, theirs = socket_inodes([first.pid]), socket_inodes([second.pid])
    tables = SocketTables()
    try:
        tables.begin()
        assert set(tables.of(first.pid, mine)) == mine
        assert theirs <= set(tables.of(second.pid, theirs))
        assert mine <= set(tables.of(first.pid, mine))  # still covered: no third dump
        assert tables.dumps == 2
    finally:
        tables.close()
