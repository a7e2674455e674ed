"""A job owner's notebook in the simulated day: a stand-in for their Jupyter server (a
process of theirs named `jupyter-server` that listens on loopback and holds what connects)
with the job as its kernel (the server's child, as a kernel is), and the browser tab
connected to it. Owner presence reads exactly this: a server of the owner's uid found by
its command name, the connections it accepted, counted for the kernels under it
(exporter/presence.py, actuator/live.py). The day runs a notebook session that way when its
owner left the tab open (a paused session's owner at lunch, an abandoned notebook whose tab
was never closed); the tab closes when the job ends, and the server ends with its kernel.

A stand-in, labelled as one: the day measures the policy, not Jupyter. The real server's
connections are read in tests/exporter/test_presence.py against jupyter_server itself."""

from __future__ import annotations

import contextlib
import pwd
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# Run as a script called `jupyter-server` (the name the presence reader knows, as a console
# script looks); stdlib only. As root it binds, starts the kernel (its child: the command
# after "--", which switches to the owner itself), says where it listens and which PID the
# kernel has in a file (never on stdout: that is the kernel's log, and a write there would
# read as the kernel's activity), becomes the owner, stays dumpable (so its /proc entries
# are the owner's, as an exec'd server's are), holds every connection until the browser
# closes it, and ends with its kernel, with its kernel's status.
SCRIPT = """\
import ctypes, os, signal, socket, sys, threading
uid, gid, info, kernel = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[5:]
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(8)
child = os.fork()
if child == 0:
    server.close()
    os.execvp(kernel[0], kernel)
with open(info + ".tmp", "w") as out:
    out.write(f"{server.getsockname()[1]} {child}\\n")
os.rename(info + ".tmp", info)
if os.getuid() != uid:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    ctypes.CDLL(None, use_errno=True).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
def serve(tab):
    tab.sendall(b"1")  # accepted: the connection is now the server's own socket
    while tab.recv(64):
        pass
    tab.close()  # the browser went away: so does the server's end, as Jupyter's does
def accept():
    while True:
        threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
signal.signal(signal.SIGTERM, lambda *_: None)  # the session's SIGTERM: the kernel decides
_, status = os.waitpid(child, 0)
code = os.waitstatus_to_exitcode(status)
os._exit(code if code >= 0 else 128 - code)
"""
INFO_TIMEOUT_S = 10.0


def server_argv(directory: Path, user: str, info: Path, kernel: Sequence[str]) -> list[str]:
    """The command that runs `kernel` under the owner's stand-in notebook server; the server
    writes its port and the kernel's PID to `info` (read them with `read_info`)."""
    account = pwd.getpwnam(user)
    script = directory / "jupyter-server"
    if not script.exists():
        directory.mkdir(parents=True, exist_ok=True)
        script.write_text(SCRIPT)
    uid, gid = str(account.pw_uid), str(account.pw_gid)
    return [sys.executable, str(script), uid, gid, str(info), "--", *kernel]


def read_info(info: Path, timeout: float = INFO_TIMEOUT_S) -> tuple[int, int]:
    """The server's port and its kernel's PID, once the server has said them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            port, kernel = info.read_text().split()
            return int(port), int(kernel)
        time.sleep(0.02)
    raise RuntimeError("the stand-in notebook server did not start")


class NotebookTab:
    """The owner's browser tab, connected to their notebook server."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.tab = socket.create_connection(("127.0.0.1", port), timeout=5)
        # Until the server accepts it, the connection sits in the listener's queue, no
        # socket of the server's yet: the tab is open once the server says it accepted.
        if self.tab.recv(1) != b"1":
            self.close()
            raise RuntimeError("the stand-in notebook server did not accept the tab")

    def close(self) -> None:
        """The tab closed (the job is over, or its owner closed it)."""
        with contextlib.suppress(OSError):
            self.tab.close()
