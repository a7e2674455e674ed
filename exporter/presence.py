"""An owner's presence on this node, as evidence: their login sessions and how long since
each one's terminal was used, and the connections open to the Jupyter servers they run.

What counts, and why:
- **A login session** is a utmp record of a user process (`USER_PROCESS`, written by
  login, sshd or a terminal emulator) whose leader still lives and whose terminal is a
  character device under /dev **owned by that user's uid** (login programs hand the
  terminal to the user). A record whose terminal another uid owns is never this user's
  session: utmp is written by whoever is in the utmp group, the terminal's owner by root.
- **Terminal idle** is the time since the terminal's last access (its atime, which the
  kernel moves on input), as `w` reports it.
- **Notebook connections** are the TCP connections a Jupyter server of that uid has
  accepted on its listening ports: each open browser tab holds its websockets there, which
  is what JupyterHub's idle culler reads (`cull_connected`). Connections the server makes to
  its kernels' ports are not counted (they do not arrive on its listening ports).

What it misses (docs/metrics.md): a session inside screen or tmux whose terminal is not
attached, an SSH tunnel to a notebook (it counts as a connection, though no one may be
looking), a notebook server in another network namespace whose sockets cannot be read.
Presence only ever makes a decision gentler; its absence, or unknown, is what the actuator
assumes.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from exporter import procfs
from exporter.identity import command_name
from exporter.netactivity import socket_inodes
from exporter.netdiag import SocketsUnknown, SocketTables

UTMP = Path("/var/run/utmp")
DEV = Path("/dev")
USER_PROCESS = 7
# glibc's struct utmp on Linux (x86_64 and aarch64 alike): 384 bytes, little-endian.
_RECORD = struct.Struct("<h2xi32s4s32s256shhiii16s20s")
_LINE = re.compile(r"(?:pts/[0-9]{1,7}|tty[A-Za-z0-9]{1,16}|console)")
# A Jupyter server, as its command names it (console script or `python -m`).
_JUPYTER_SERVER = re.compile(
    r"jupyter-(?:lab|notebook|server|labhub)|jupyterhub-singleuser|"
    r"jupyter_server(?:\..*)?|jupyterlab(?:\..*)?|notebook(?:\.app)?"
)
# Finding the notebook servers lists /proc; a server lives for days, so the list is reused
# this long (each entry re-checked by its start ticks), while its connections are read
# at every call: a scrape does not walk /proc for it.
SERVERS_MAX_AGE = 30.0
MAX_RECORDS = 4096  # a utmp past this is not read further (it is a few dozen records)


@dataclass(frozen=True)
class Session:
    terminal: str  # "pts/3"
    host: str  # where from, as the login program wrote it ("" on a console)
    idle_seconds: float


@dataclass(frozen=True)
class Presence:
    """What the node saw of one uid's presence. `notebook_connections` is None where the
    sockets of a server of theirs could not be read (unknown, not none)."""

    uid: int
    user: str
    sessions: tuple[Session, ...] = ()
    notebook_connections: int | None = 0

    @property
    def idle_seconds(self) -> float | None:
        """Since the most recently used of their terminals (None: no session)."""
        return min((s.idle_seconds for s in self.sessions), default=None)


@dataclass(frozen=True)
class UtmpRecord:
    kind: int
    pid: int
    line: str
    user: str
    host: str


def read_utmp(path: Path = UTMP) -> list[UtmpRecord]:
    """The records of a utmp file ([] when there is none: no one is logged in that way)."""
    try:
        with open(path, "rb") as f:
            data = f.read(_RECORD.size * MAX_RECORDS)
    except (FileNotFoundError, PermissionError):
        return []
    records = []
    for offset in range(0, len(data) - _RECORD.size + 1, _RECORD.size):
        kind, pid, line, _id, user, host, *_ = _RECORD.unpack_from(data, offset)
        records.append(UtmpRecord(kind, pid, _text(line), _text(user), _text(host)))
    return records


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class PresenceReader:
    """One reader of presence evidence for the uids asked (those holding GPU memory)."""

    def __init__(
        self,
        *,
        utmp: Path = UTMP,
        dev: Path = DEV,
        proc_root: Path = procfs.PROC,
        sockets: SocketTables | None = None,
        clock: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.utmp, self.dev, self.proc_root = utmp, dev, proc_root
        self.sockets = sockets
        self.clock, self.mono = clock, mono
        # (when listed, the uids asked, [(pid, start ticks, uid)]) of the last /proc walk
        self._servers: tuple[float, frozenset[int], list[tuple[int, int, int]]] | None = None

    def read(self, uids: Iterable[int]) -> dict[int, Presence]:
        wanted = set(uids)
        if not wanted:
            return {}
        sessions = self.sessions(wanted)
        connections = self._notebook_connections(wanted)
        return {
            uid: Presence(
                uid=uid,
                user=_user_name(uid),
                sessions=sessions[uid],
                notebook_connections=connections.get(uid, 0),
            )
            for uid in sorted(wanted)
        }

    def sessions(self, uids: set[int]) -> dict[int, tuple[Session, ...]]:
        """Each uid's login sessions on its own terminals, by terminal name."""
        now = self.clock()
        found: dict[int, list[Session]] = {uid: [] for uid in uids}
        for record in read_utmp(self.utmp):
            seen = self._session(record, now)
            if seen is not None and seen[0] in uids:
                found[seen[0]].append(seen[1])
        return {uid: tuple(sorted(s, key=lambda s: s.terminal)) for uid, s in found.items()}

    def _session(self, record: UtmpRecord, now: float) -> tuple[int, Session] | None:
        """The record as a session of a uid, or None where it proves none."""
        if record.kind != USER_PROCESS or record.pid <= 0 or not _LINE.fullmatch(record.line):
            return None
        if not (self.proc_root / str(record.pid)).exists():
            return None  # a stale record: its leader ended without logging out
        try:
            uid = pwd.getpwnam(record.user).pw_uid
            tty = os.stat(self.dev / record.line)
        except (KeyError, OSError):
            return None
        if not stat.S_ISCHR(tty.st_mode) or tty.st_uid != uid:
            return None  # not a terminal, or another uid's: never this user's presence
        idle = max(0.0, now - tty.st_atime)
        return uid, Session(record.line, record.host[:64], idle)

    def _notebook_connections(self, uids: set[int]) -> dict[int, int | None]:
        """Per uid, connections accepted by their Jupyter servers (None: unreadable)."""
        found: dict[int, int | None] = {}
        for (_, uid), count in self.notebook_servers(uids).items():
            known = found.get(uid, 0)
            found[uid] = None if count is None or known is None else known + count
        return found

    def notebook_servers(self, uids: set[int]) -> dict[tuple[int, int], int | None]:
        """Each Jupyter server the uids run, (pid, uid): the connections it accepted."""
        return {(pid, uid): self._accepted(pid) for pid, uid in self._jupyter_servers(uids)}

    def _jupyter_servers(self, uids: set[int]) -> list[tuple[int, int]]:
        """The uids' Jupyter servers, (pid, uid): the last walk's while it is fresh and
        asked for the same uids, those still the same processes."""
        now, asked = self.mono(), frozenset(uids)
        cached = self._servers
        if cached is None or cached[1] != asked or now - cached[0] >= SERVERS_MAX_AGE:
            cached = self._servers = (now, asked, self._walk(uids))
        return [
            (pid, uid)
            for pid, ticks, uid in cached[2]
            if procfs.start_ticks(pid, self.proc_root) == ticks
        ]

    def _walk(self, uids: set[int]) -> list[tuple[int, int, int]]:
        servers = []
        with os.scandir(self.proc_root) as listing:
            pids = [int(e.name) for e in listing if e.name.isdigit()]
        for pid in pids:
            try:  # the directory's owner first: one stat, no read, for most processes
                if os.stat(f"{self.proc_root}/{pid}").st_uid not in uids:
                    continue
            except OSError:
                continue
            # Its command line next, one read: most of a uid's processes are no server, and
            # only a server's status and start are read (a uid running a thousand
            # processes cost four reads each: docs/performance.md, "The agents' walk").
            argv = procfs.read_cmdline(pid, self.proc_root)
            if not argv or not _JUPYTER_SERVER.fullmatch(command_name(argv)):
                continue
            status = procfs.read_status(pid, self.proc_root)
            if status is None or status.uid not in uids:
                continue
            ticks = procfs.start_ticks(pid, self.proc_root)
            if ticks is not None:
                servers.append((pid, ticks, status.uid))
        return servers

    def _accepted(self, pid: int) -> int | None:
        if self.sockets is None:
            return None
        try:
            inodes = socket_inodes([pid], str(self.proc_root))
            table = self.sockets.of(pid, inodes)
        except SocketsUnknown:
            return None
        mine = [table[i] for i in inodes if i in table]
        listening = {s.port for s in mine if s.listening}
        return sum(1 for s in mine if not s.listening and s.port in listening)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
