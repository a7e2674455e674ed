"""The simulated day's notebook (actuator/demo/notebook_tab.py) as the presence reader and
the actuator's re-check see it: a server of the owner's uid, found by its command name,
with the job as its kernel (its child) and the tab's one connection, counted for that
kernel and for no other process of the owner; none once the tab closes; the server ends
with its kernel."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

from actuator.demo.notebook_tab import NotebookTab, read_info, server_argv
from actuator.live import ancestry, connections_under
from exporter import procfs
from exporter.identity import command_name
from exporter.netdiag import SocketTables
from exporter.presence import PresenceReader
from exporter.procfs import read_cmdline
from tests.support import wait_until

NOBODY = "nobody"  # an account no other test runs a notebook server as


def _servers(uid: int) -> dict[int, int | None]:
    tables = SocketTables()
    try:
        reader = PresenceReader(utmp=Path("/nonexistent/utmp"), sockets=tables)
        return {pid: n for (pid, _), n in reader.notebook_servers({uid}).items()}
    finally:
        tables.close()


def test_a_tab_is_presence_for_the_kernel_under_its_server_only(tmp_path: Path) -> None:
    uid = pwd.getpwnam(NOBODY).pw_uid
    info = tmp_path / "kernel.info"
    server = subprocess.Popen(server_argv(tmp_path, NOBODY, info, ["sleep", "300"]))
    other = subprocess.Popen(["setpriv", f"--reuid={uid}", "--clear-groups", "sleep", "300"])
    try:
        port, kernel = read_info(info)
        wait_until(lambda: os.stat(f"/proc/{server.pid}").st_uid == uid, 10)  # the owner's
        assert command_name(read_cmdline(server.pid) or []) == "jupyter-server"
        stat = procfs.read_stat(kernel)
        assert stat is not None and stat.ppid == server.pid  # the kernel is its child
        assert connections_under(_servers(uid), ancestry(kernel)) == 0  # no tab yet
        tab = NotebookTab(port)
        servers = _servers(uid)
        assert connections_under(servers, ancestry(kernel)) == 1
        # Another process of the same owner, not under that server: the tab says nothing of it.
        assert connections_under(servers, ancestry(other.pid)) == 0
        tab.close()
        wait_until(lambda: connections_under(_servers(uid), ancestry(kernel)) == 0, 10)
        os.kill(kernel, 15)  # the kernel ends (reclaimed, or done): its server with it
        assert server.wait(10) == 128 + 15
    finally:
        for process in (server, other):
            if process.poll() is None:
                process.kill()
                process.wait(10)


def test_connections_under_a_server_that_cannot_be_read_are_unknown() -> None:
    assert connections_under({10: 2, 20: None}, {5, 10}) == 2
    assert connections_under({10: 2, 20: None}, {5, 20}) is None  # unknown, never absence
    assert connections_under({10: 2}, {5}) == 0
