"""A job owner's notebook tab in the simulated day: a stand-in for their Jupyter server (a
process of theirs named `jupyter-server` that listens on loopback and holds what connects)
and the browser tab connected to it. Owner presence (exporter/presence.py) reads exactly
this: a server of the owner's uid found by its command name, and the connections it
accepted. The day opens one for a paused session whose owner left the tab open, and for an
abandoned notebook whose tab was never closed; the tab closes when the job ends.

A stand-in, labelled as one: the day measures the policy, not Jupyter. The real server's
connections are read in tests/exporter/test_presence.py against jupyter_server itself."""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path

# Run as a script called `jupyter-server` (the name the presence reader knows, as a console
# script looks); stdlib only. It binds as root, becomes the owner, stays dumpable (so its
# /proc entries are the owner's, as an exec'd server's are), and holds every connection.
SCRIPT = """\
import ctypes, os, socket, sys
uid, gid = int(sys.argv[1]), int(sys.argv[2])
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(8)
if os.getuid() != uid:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    ctypes.CDLL(None, use_errno=True).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
print(server.getsockname()[1], flush=True)
held = []
while True:
    held.append(server.accept()[0])
    held[-1].sendall(b"1")  # accepted: the connection is now the server's own socket
"""


class NotebookTab:
    """An owner's stand-in notebook server with one browser tab connected to it."""

    def __init__(self, work_dir: Path, user: str | None) -> None:
        """`user`: the account it runs as (None: whoever runs the day)."""
        account = pwd.getpwnam(user) if user else pwd.getpwuid(os.getuid())
        script = work_dir / "jupyter-server"
        if not script.exists():
            work_dir.mkdir(parents=True, exist_ok=True)
            script.write_text(SCRIPT)
        self.server = subprocess.Popen(
            [sys.executable, str(script), str(account.pw_uid), str(account.pw_gid)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert self.server.stdout is not None
        port = self.server.stdout.readline().strip()
        if not port.isdigit():
            self.server.kill()
            self.server.wait(10)
            raise RuntimeError("the stand-in notebook server did not start")
        self.port = int(port)
        self.tab = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        # Until the server accepts it, the connection sits in the listener's queue, no
        # socket of the server's yet: the tab is open once the server says it accepted.
        if self.tab.recv(1) != b"1":
            self.close()
            raise RuntimeError("the stand-in notebook server did not accept the tab")

    @property
    def pid(self) -> int:
        return self.server.pid

    def close(self) -> None:
        """The tab closed and the server stopped (the job is over)."""
        with contextlib.suppress(OSError):
            self.tab.close()
        if self.server.poll() is None:
            self.server.kill()
        self.server.wait(10)
