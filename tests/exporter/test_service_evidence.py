"""A job is judged by its work, not its sockets (issue 57), on real sockets and processes:
a job's own rendezvous listeners (a port bound to 0, as NCCL's bootstrap and Gloo's pairs
are; PyTorch's TCPStore on MASTER_PORT, on every interface) make no service, whatever
peers connect to them; a listener other hosts reach serves only when a client connects;
a tree holding a connection is unknown until the meter has watched it for a window; a
flood of another user's listeners changes nothing about this tree."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from exporter.netactivity import HeldListeners, NetworkMeter, NetworkReading, Rendezvous
from exporter.netdiag import SocketTables
from tests.support import Children, free_service_port

# Listens on ADDRESS:PORT (0: the kernel picks from the ephemeral range) and keeps every
# connection it accepts open until its peer closes it, as TCPStore and NCCL's bootstrap
# keep their ranks'.
SERVE = """
import socket, sys, threading
s = socket.socket(socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()
def hold(conn):  # until the peer closes, then close too
    while conn.recv(65536): pass
    conn.close()
def accept():
    while True: threading.Thread(target=hold, args=(s.accept()[0],), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
print("ready", flush=True); print(s.getsockname()[1], flush=True); sys.stdin.read()
"""


@pytest.fixture
def tables() -> Iterator[SocketTables]:
    found = SocketTables()
    yield found
    found.close()


def _serve(
    children: Children, port: int = 0, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], int]:
    child = children.python(SERVE, "0.0.0.0", str(port), env={**os.environ, **(env or {})})
    assert child.stdout is not None
    return child, int(child.stdout.readline())


def _read(meter: NetworkMeter, child: subprocess.Popen[str]) -> NetworkReading:
    meter.tables.begin()
    try:
        return meter.read((child.pid, 0), [child.pid])
    finally:
        meter.tables.end()


def _meter(tables: SocketTables, window: float = 60.0) -> NetworkMeter:
    return NetworkMeter(tables, window=window, rendezvous=Rendezvous.of_host())


def _connect(port: int) -> socket.socket:
    peer = socket.create_connection(("127.0.0.1", port))
    time.sleep(0.1)  # accepted by the server's thread
    return peer


@pytest.mark.reliability(67)
def test_a_listener_bound_to_0_is_the_jobs_own_rendezvous(
    children: Children, tables: SocketTables
) -> None:
    """NCCL's bootstrap and proxy, Gloo's pairs: bound to port 0 on the node's address, their
    peers told the port. A peer rank connected is not a client."""
    rank, port = _serve(children)
    low, high = Rendezvous.of_host().ephemeral
    assert low <= port <= high
    peer = _connect(port)
    try:
        seen = _read(_meter(tables), rank)
    finally:
        peer.close()
    assert (seen.listening_external, seen.listening_rendezvous) == (0, 1)
    assert seen.clients == 0 and seen.client_ago is None and seen.connections == 1


@pytest.mark.reliability(67)
def test_tcpstore_on_master_port_on_every_interface_is_the_jobs_own(
    children: Children, tables: SocketTables
) -> None:
    """PyTorch's TCPStore binds every interface even for MASTER_ADDR=127.0.0.1; its port is
    the MASTER_PORT the ranks were started with."""
    port = free_service_port()
    store, _ = _serve(children, port, {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    peer = _connect(port)
    try:
        seen = _read(_meter(tables), store)
    finally:
        peer.close()
    assert (seen.listening_external, seen.listening_rendezvous) == (0, 1)
    assert seen.clients == 0


@pytest.mark.reliability(67)
def test_a_listener_serves_only_when_a_client_connects(
    children: Children, tables: SocketTables
) -> None:
    """A TensorBoard started with --bind_all, a debugger port, an inference server: all
    listen where other hosts reach them; only a client connected makes one serve, and the
    meter remembers when it last saw one (on the monotonic clock)."""
    server, port = _serve(children, free_service_port())
    meter = _meter(tables)
    quiet = _read(meter, server)
    assert (quiet.listening_external, quiet.listening_rendezvous) == (1, 0)
    assert quiet.clients == 0 and quiet.client_ago is None and quiet.last_client is None
    client = _connect(port)
    served = _read(meter, server)
    assert served.clients == 1 and served.client_ago == 0.0
    assert served.last_client == pytest.approx(time.time(), abs=1.0)
    client.close()
    time.sleep(0.3)
    after = _read(meter, server)
    assert after.clients == 0
    assert after.client_ago is not None and after.client_ago >= 0.3


@pytest.mark.reliability(68)
def test_a_tree_with_a_connection_is_unknown_until_watched_for_a_window(
    children: Children, tables: SocketTables
) -> None:
    """A first reading is a baseline: a download under way shows only at the next one."""
    server, port = _serve(children, free_service_port())
    peer = _connect(port)
    try:
        meter = _meter(tables, window=0.5)
        first = _read(meter, server)
        assert not first.covered and first.watched_for == 0.0
        time.sleep(0.6)
        later = _read(meter, server)
        assert later.covered and later.watched_for >= 0.5
    finally:
        peer.close()


@pytest.mark.reliability(68)
def test_a_tree_that_never_held_a_connection_hides_nothing(
    children: Children, tables: SocketTables
) -> None:
    """No connection at the first reading: one that opens later counts everything it moved."""
    server, _ = _serve(children, free_service_port())
    first = _read(_meter(tables, window=3600.0), server)
    assert first.covered and first.connections == 0


@pytest.mark.reliability(69)
def test_another_users_flood_of_listeners_changes_nothing_for_this_tree(
    children: Children, tables: SocketTables
) -> None:
    """Thousands of listeners held by another process (another uid where the suite runs as
    root) in the same namespace: this tree's reading is the same, and read in time."""
    server, port = _serve(children, free_service_port())
    flood_script = (
        "import os, socket, sys\n"
        "if os.getuid() == 0: os.setgid(65534); os.setuid(65534)\n"
        "held = []\n"
        "for _ in range(int(sys.argv[1])):\n"
        "    s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen(); held.append(s)\n"
        "print('ready', flush=True); print(len(held), flush=True); sys.stdin.read()\n"
    )
    meter = _meter(tables)
    client = _connect(port)
    try:
        alone = _read(meter, server)
        flood = children.python(flood_script, "3000")
        assert flood.stdout is not None and int(flood.stdout.readline()) == 3000
        started = time.monotonic()
        crowded = _read(meter, server)
        took = time.monotonic() - started
    finally:
        client.close()
    assert (
        (crowded.listening_external, crowded.clients, crowded.connections)
        == (
            alone.listening_external,
            alone.clients,
            alone.connections,
        )
        == (1, 1, 1)
    )
    assert took < 1.0, f"a reading took {took:.2f}s beside 3,000 foreign listeners"


def test_rendezvous_ports_come_from_the_host_range_and_configuration(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "sys" / "net" / "ipv4").mkdir(parents=True)
    (tmp_path / "sys" / "net" / "ipv4" / "ip_local_port_range").write_text("40000\t50000\n")
    found = Rendezvous.of_host(frozenset({7000}), str(tmp_path))
    assert found.ephemeral == (40000, 50000)
    assert found.is_rendezvous(7000, None) and found.is_rendezvous(45000, None)
    assert found.is_rendezvous(8123, 8123)  # MASTER_PORT
    assert not found.is_rendezvous(8000, None) and not found.is_rendezvous(29500, None)
    assert Rendezvous.of_host(proc_root=str(tmp_path / "none")).ephemeral == (32768, 60999)


def test_master_port_is_read_from_the_environment_as_exec_d(
    children: Children, tables: SocketTables
) -> None:
    """Garbage in MASTER_PORT names no port (the listener stays one that may serve)."""
    port = free_service_port()
    server, _ = _serve(children, port, {"MASTER_PORT": f"{port}x"})
    seen = _read(_meter(tables), server)
    assert (seen.listening_external, seen.listening_rendezvous) == (1, 0)
    assert sys.platform == "linux"


# A server in a network namespace of its own (a container's, a pod's) with loopback up,
# which on "hit" serves one client per request: the client connects, sends 8 KiB, reads the
# answer and closes, all between two readings.
POD = """
import socket, sys, threading
from pyroute2 import IPRoute
with IPRoute() as ip:
    ip.link("set", index=ip.link_lookup(ifname="lo")[0], state="up")
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8000)); s.listen()
def serve():
    while True:
        conn, _ = s.accept()
        data = b""
        while len(data) < 8192:
            data += conn.recv(65536)
        conn.sendall(b"x" * 8192); conn.close()
threading.Thread(target=serve, daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:
    c = socket.create_connection(("127.0.0.1", 8000)); c.sendall(b"y" * 8192)
    while c.recv(65536): pass
    c.close(); print("done", flush=True)
"""


@pytest.mark.reliability(71)
@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs root")
def test_a_client_per_request_in_a_pods_namespace_is_seen(
    children: Children, tables: SocketTables
) -> None:
    """The connection opens and closes between two readings, so the tree never holds it;
    the namespace's own counters (connections accepted, bytes) still see the request."""
    pod = children.start(["unshare", "--net", sys.executable, "-c", POD])
    assert pod.stdin is not None and pod.stdout is not None
    meter = _meter(tables)
    first = _read(meter, pod)
    assert first.listening_external == 1 and first.clients == 0 and first.client_ago is None
    pod.stdin.write("hit\n")
    pod.stdin.flush()
    assert pod.stdout.readline().strip() == "done"
    second = _read(meter, pod)
    assert second.connections == 0 and second.clients == 0  # nothing open to see
    assert second.client_ago == 0.0, second
    assert second.last_activity == pytest.approx(time.time(), abs=1.0), second


@pytest.mark.reliability(71)
def test_a_client_per_request_in_the_hosts_namespace_is_not_seen(
    children: Children, tables: SocketTables
) -> None:
    """What is still invisible (docs/metrics.md): the host's namespace counts every user's
    traffic, so there a connection that opens and closes between two readings is not seen."""
    server, port = _serve(children, free_service_port())
    meter = _meter(tables)
    _read(meter, server)
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"y" * 8192)
    time.sleep(0.2)  # the server closed its side
    second = _read(meter, server)
    assert second.client_ago is None and second.last_activity is None


def test_a_progressing_tree_is_read_only_while_it_may_serve(
    children: Children, tables: SocketTables
) -> None:
    """Cheap (issue 57): a tree whose heartbeat or log moved within the window is neither
    idle nor stalled, so once a reading found no listener that may serve, its sockets are
    not read while it progresses; when it stops, its next reading is a fresh baseline. A
    tree with a serving listener is always read (its clients make it a service)."""
    rank, _ = _serve(children)  # a rendezvous listener only
    server, _ = _serve(children, free_service_port())
    meter = _meter(tables)
    keys = {(rank.pid, 0): [rank.pid], (server.pid, 0): [server.pid]}
    first = meter.read_many(keys)
    assert set(first) == set(keys)
    tables.begin()
    dumps = tables.dumps
    progressing = meter.read_many(keys, progressing=list(keys))
    # The rank is left unread: its listeners as last read, so their series do not flap.
    assert progressing[(rank.pid, 0)] == HeldListeners(loopback=0, rendezvous=1)
    assert isinstance(progressing[(server.pid, 0)], NetworkReading)
    assert tables.dumps == dumps + 1
    stopped = meter.read_many(keys)
    again = stopped[(rank.pid, 0)]
    assert isinstance(again, NetworkReading) and again.watched_for == 0.0  # a new baseline
