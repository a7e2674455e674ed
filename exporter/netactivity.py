"""A process tree's network evidence: what it listens on, and when data last moved on its
connections by more than keep-alive traffic.

The tree's sockets are the ones its processes hold open (``socket:[INODE]`` in
/proc/PID/fd), looked up in the kernel's list for the tree's network namespace
(exporter/netdiag.py). Bytes are the kernel's per-connection counters (received, and sent
and acknowledged).

Keep-alive is not work: a Jupyter kernel's server, a training's metrics client and an
idle HTTP keep-alive move a few bytes every few seconds. Data counts as moved only when
the tree's connections moved more than `floor` bytes within the last `window` seconds; the
activity timestamp is then the kernel's time of the latest data on the connections that
moved. Below the floor the timestamp stays where it was (absent if data never moved).
A tree's first reading is its baseline: only what moves after it counts, and until the
meter has watched a tree for a whole `window` its evidence is unknown, never quiet
(`NetworkReading.covered`), unless the tree has held no connection since the first reading
(a connection opened later counts everything it moved).

What serves and what is the job's own: a listener bound to loopback is reachable from this
host only (a Jupyter kernel's ports); a listener on a rendezvous port is the job's own
(`Rendezvous`: a port bound to 0, which the kernel picks from the ephemeral range, as
NCCL's bootstrap and proxy and Gloo's pairs do; PyTorch's MASTER_PORT as the process was
started with it; the configured ports, by default TCPStore's 29500 and torchrun's 29400).
Any other listener may serve; a connection accepted on one (an established socket of the
tree on that listener's port) is a client, and a tree is judged by its clients, not by
its listeners (docs/actuator.md, "Services").

A connection opened and closed between two readings is not seen (its counters go with
it); one open at a reading counts with everything it moved since it opened. Where the tree
lives in a network namespace of its own (a container's, a pod's) and has a serving
listener, the namespace's own counters (exporter/netns_counters.py) see those too:
connections accepted between two readings are clients, and the bytes the namespace moved
meanwhile count towards the floor.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from exporter.netdiag import SocketsUnknown, SocketTables, TcpSocket
from exporter.netns_counters import NamespaceCounters
from exporter.procfs import read_environ_value

# Bytes per window that keep-alive traffic stays under (docs/metrics.md: measured against
# an idle ipykernel with jupyter_server, tests/exporter/test_jupyter_keepalive.py).
DEFAULT_FLOOR = 4096
DEFAULT_WINDOW = 60.0
_SOCKET_PREFIX = "socket:["
# Rendezvous ports a job's own ranks meet on: TCPStore's default MASTER_PORT, torchrun's
# c10d rendezvous endpoint.
DEFAULT_RENDEZVOUS_PORTS = frozenset({29400, 29500})
_EPHEMERAL_DEFAULT = (32768, 60999)  # Linux's default net.ipv4.ip_local_port_range


@dataclass(frozen=True)
class NetworkReading:
    listening_loopback: int
    listening_external: int  # listeners other hosts reach that are not a rendezvous
    ports: frozenset[int]  # the ports it listens on
    connections: int
    last_activity: float | None  # unix seconds; None: no data above the floor seen yet
    listening_rendezvous: int = 0  # the job's own listeners other hosts reach (Rendezvous)
    clients: int = 0  # connections accepted on its serving listeners, open now
    client_ago: float | None = None  # seconds since a client was last seen; None: never
    last_client: float | None = None  # the same as unix seconds
    watched_for: float = 0.0  # seconds this meter has read the tree (monotonic clock)
    covered: bool = False  # quiet can be told from unknown (watched a window, or no baseline)


@dataclass(frozen=True)
class HeldListeners:
    """A tree not read this pass (it progresses; `NetworkMeter.read_many`): its listeners as
    its last reading found them, so their series do not flap. It had none that may serve."""

    loopback: int
    rendezvous: int


@dataclass(frozen=True)
class Rendezvous:
    """The ports a job's own ranks meet on, which make no service."""

    ports: frozenset[int] = DEFAULT_RENDEZVOUS_PORTS
    ephemeral: tuple[int, int] = _EPHEMERAL_DEFAULT

    @classmethod
    def of_host(
        cls, ports: frozenset[int] = DEFAULT_RENDEZVOUS_PORTS, proc_root: str = "/proc"
    ) -> Rendezvous:
        """With the host's ephemeral range (the kernel's default when unreadable)."""
        try:
            with open(f"{proc_root}/sys/net/ipv4/ip_local_port_range") as f:
                low, high = (int(x) for x in f.read().split()[:2])
        except (OSError, ValueError):
            return cls(ports)
        return cls(ports, (low, high))

    def is_rendezvous(self, port: int, master_port: int | None) -> bool:
        low, high = self.ephemeral
        return port in self.ports or port == master_port or low <= port <= high


@dataclass
class _Meter:
    counters: dict[int, int] = field(default_factory=dict)  # inode -> bytes moved
    moves: deque[tuple[float, int]] = field(default_factory=deque)  # (mono, bytes)
    last_activity: float | None = None
    read_at: float | None = None  # mono; None until the first reading (the baseline)
    first_at: float | None = None  # mono of the first reading
    client_at: float | None = None  # mono: a client last seen
    master_port: int | None = None  # the root's MASTER_PORT (read once: fixed at exec)
    master_read: bool = False
    # A connection was open at some reading: until a window passes, its baseline may hide
    # data moving (a tree that never held one has nothing hidden: a connection that opens
    # later counts everything it moved).
    connected: bool = False
    namespace: tuple[int, NamespaceCounters] | None = None  # its own namespace's, last read
    serving: bool = False  # its last reading found a listener that may serve
    listeners: HeldListeners = HeldListeners(0, 0)  # ...and these others
    paused: bool = False  # not read while it progressed: the next reading is a baseline


def _port(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    port = int(text.strip())
    return port if 0 < port < 65536 else None


def socket_inodes(pids: Iterable[int], proc_root: str = "/proc") -> set[int]:
    """Inodes of the sockets the processes (the tree's root first) hold open (raises
    SocketsUnknown: the root gone, or a listing refused)."""
    inodes: set[int] = set()
    for index, pid in enumerate(pids):
        fd_dir = f"{proc_root}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except FileNotFoundError:
            if index == 0:  # the tree's root is gone: what it held is unknown, not nothing
                raise SocketsUnknown(f"pid {pid} is gone", "gone") from None
            continue  # a descendant exited meanwhile: it holds nothing
        except OSError as exc:
            raise SocketsUnknown.from_os_error(
                f"cannot list the open files of pid {pid}", exc
            ) from None
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue  # closed meanwhile
            if target.startswith(_SOCKET_PREFIX) and target.endswith("]"):
                inodes.add(int(target[len(_SOCKET_PREFIX) : -1]))
    return inodes


class NetworkMeter:
    """Network readings of process trees, metered between readings (one per process)."""

    def __init__(
        self,
        tables: SocketTables,
        *,
        floor: int = DEFAULT_FLOOR,
        window: float = DEFAULT_WINDOW,
        clock: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        rendezvous: Rendezvous | None = None,
    ) -> None:
        self.tables, self.floor, self.window = tables, floor, window
        self.rendezvous = rendezvous or Rendezvous.of_host(proc_root=tables.proc_root)
        self.clock, self.mono = clock, mono
        self._meters: dict[tuple[int, int], _Meter] = {}

    def read(self, key: tuple[int, int], pids: list[int]) -> NetworkReading:
        """The tree of `pids` (the root first), metered under `key` (pid, start ticks).
        Raises SocketsUnknown when its sockets cannot be read."""
        inodes = socket_inodes(pids, self.tables.proc_root)
        return self._reading(key, pids[0], inodes)

    def read_many(
        self,
        trees: dict[tuple[int, int], list[int]],
        progressing: Iterable[tuple[int, int]] = (),
    ) -> dict[tuple[int, int], NetworkReading | SocketsUnknown | HeldListeners]:
        """`read` for many trees in one pass: their open sockets first, then one dump per
        namespace that decodes only theirs. A tree in `progressing` (a heartbeat or log
        written within the window: neither idle nor stalled, whatever its network says)
        whose last reading found no listener that may serve is not read: its answer is the
        listeners that reading found, and its next reading is a fresh baseline."""
        held: dict[tuple[int, int], set[int] | SocketsUnknown] = {}
        skipped = {key for key in progressing if key in trees and self._may_skip(key)}
        for key in skipped:
            self._meters[key].paused = True
        for key, pids in trees.items():
            if key in skipped:
                continue
            try:
                held[key] = socket_inodes(pids, self.tables.proc_root)
            except SocketsUnknown as exc:
                held[key] = exc
        # One dump per namespace, for every tree's sockets at once.
        wanted = {i for h in held.values() if isinstance(h, set) for i in h}
        out: dict[tuple[int, int], NetworkReading | SocketsUnknown | HeldListeners] = {
            key: self._meters[key].listeners for key in skipped
        }
        for key, inodes in held.items():
            if isinstance(inodes, SocketsUnknown):
                out[key] = inodes
                continue
            try:
                out[key] = self._reading(key, trees[key][0], inodes, wanted)
            except SocketsUnknown as exc:
                out[key] = exc
        return out

    def _may_skip(self, key: tuple[int, int]) -> bool:
        """Read before, and then it had no listener that may serve: its clients cannot
        matter (a listener opened meanwhile is seen at its next reading, unproven)."""
        meter = self._meters.get(key)
        return meter is not None and meter.read_at is not None and not meter.serving

    def _reading(
        self, key: tuple[int, int], root: int, inodes: set[int], wanted: set[int] | None = None
    ) -> NetworkReading:
        # A tree that holds no socket needs no list of its namespace's (the dump walks the
        # kernel's whole TCP table: about a millisecond a family).
        table = self.tables.of(root, inodes if wanted is None else wanted) if inodes else {}
        mine = [table[i] for i in inodes if i in table]
        meter = self._meters.setdefault(key, _Meter())
        if meter.paused:  # not read while it progressed: what moved meanwhile is history
            meter = self._meters[key] = _Meter(
                last_activity=meter.last_activity, client_at=meter.client_at
            )
        reachable = any(s.listening and not s.loopback for s in mine)
        if not meter.master_read and reachable:
            meter.master_read = True  # the environment as exec'd never changes
            meter.master_port = _port(read_environ_value(root, "MASTER_PORT", self._proc))
        return self._measure(meter, mine, self.tables.counters(root) if reachable else None)

    @property
    def _proc(self) -> Path:
        return Path(self.tables.proc_root)

    def _measure(
        self,
        meter: _Meter,
        sockets: list[TcpSocket],
        namespace: tuple[int, NamespaceCounters] | None = None,
    ) -> NetworkReading:
        now, mono = self.clock(), self.mono()
        # The first reading is the baseline: what moved before it moved at an unknown time
        # (a kernel's connections answered a ping a second ago), so it is never activity.
        first = meter.read_at is None
        meter.read_at = mono
        if meter.first_at is None:
            meter.first_at = mono
        listeners = [s for s in sockets if s.listening]
        external = [s for s in listeners if not s.loopback]
        own = [s for s in external if self.rendezvous.is_rendezvous(s.port, meter.master_port)]
        serving = {s.port for s in external} - {s.port for s in own}
        moved, newest_ms = 0, None
        counters: dict[int, int] = {}
        for s in sockets:
            if s.listening:
                continue
            counters[s.inode] = s.moved
            if first:
                continue
            delta = s.moved - meter.counters.get(s.inode, 0)
            if delta > 0:
                moved += delta
                ago = s.data_ms_ago
                if ago is not None:
                    newest_ms = ago if newest_ms is None else min(newest_ms, ago)
        meter.counters = counters
        accepted = self._accepted(meter, namespace, first) if serving else 0
        if accepted and namespace is not None and meter.namespace is not None:
            # The namespace's bytes since the last reading, the closed connections' too.
            moved += namespace[1].octets - meter.namespace[1].octets
            newest_ms = 0
        meter.namespace = namespace
        if moved:
            meter.moves.append((mono, moved))
        while meter.moves and meter.moves[0][0] < mono - self.window:
            meter.moves.popleft()
        if moved and sum(b for _, b in meter.moves) > self.floor:
            at = now - (newest_ms or 0) / 1000
            if meter.last_activity is None or at > meter.last_activity:
                meter.last_activity = at
        # A connection accepted on a serving listener keeps the listener's port as its own.
        clients = sum(1 for s in sockets if not s.listening and s.port in serving)
        if clients or accepted:
            meter.client_at = mono
        watched = mono - meter.first_at
        meter.connected = meter.connected or bool(counters)
        meter.serving = bool(serving)
        meter.listeners = HeldListeners(len(listeners) - len(external), len(own))
        return NetworkReading(
            listening_loopback=len(listeners) - len(external),
            listening_external=len(external) - len(own),
            ports=frozenset(s.port for s in listeners),
            connections=len(counters),
            last_activity=meter.last_activity,
            listening_rendezvous=len(own),
            clients=clients,
            client_ago=None if meter.client_at is None else mono - meter.client_at,
            last_client=None if meter.client_at is None else now - (mono - meter.client_at),
            watched_for=watched,
            covered=watched >= self.window or not meter.connected,
        )

    @staticmethod
    def _accepted(
        meter: _Meter, namespace: tuple[int, NamespaceCounters] | None, first: bool
    ) -> int:
        """Connections the tree's own namespace accepted since its last reading (0 in the
        host's namespace, at a first reading, or across a change of namespace)."""
        before = meter.namespace
        if first or namespace is None or before is None or before[0] != namespace[0]:
            return 0
        return max(0, namespace[1].accepted - before[1].accepted)

    def prune(self, live: set[tuple[int, int]]) -> None:
        """Forget the processes no longer seen."""
        self._meters = {k: m for k, m in self._meters.items() if k in live}

    def forget_unread(self, max_age: float) -> None:
        """Forget the processes not read for `max_age` seconds."""
        since = self.mono() - max_age
        self._meters = {
            k: m for k, m in self._meters.items() if m.read_at is not None and m.read_at >= since
        }
