"""The simulated day's notebook tab (actuator/demo/notebook_tab.py) as the presence reader
sees it: a server of the owner's uid, found by its command name, with the tab's one
connection; none once it closes."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from actuator.demo.notebook_tab import NotebookTab
from exporter.identity import command_name
from exporter.netdiag import SocketTables
from exporter.presence import PresenceReader
from exporter.procfs import read_cmdline

NOBODY = "nobody"  # an account no other test runs a notebook server as


def _connections(uid: int) -> int | None:
    tables = SocketTables()
    try:
        reader = PresenceReader(utmp=Path("/nonexistent/utmp"), sockets=tables)
        return reader.read([uid])[uid].notebook_connections
    finally:
        tables.close()


def test_an_owners_tab_is_their_presence_until_it_closes(tmp_path: Path) -> None:
    uid = pwd.getpwnam(NOBODY).pw_uid
    tab = NotebookTab(tmp_path, NOBODY)
    try:
        assert os.stat(f"/proc/{tab.pid}").st_uid == uid  # the owner's, as a server's is
        assert command_name(read_cmdline(tab.pid) or []) == "jupyter-server"
        assert _connections(uid) == 1
    finally:
        tab.close()
    assert tab.server.poll() is not None
    assert _connections(uid) == 0
