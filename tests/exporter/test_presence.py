"""An owner's presence, read from real things: a utmp file of real records naming real
pseudo-terminals and live session leaders, and a real jupyter_server with and without a
browser-like websocket connected. Forged records prove nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tornado.websocket import websocket_connect

from exporter.netdiag import SocketTables
from exporter.presence import USER_PROCESS, PresenceReader, read_utmp
from tests.helpers.scraper import Scraper
from tests.helpers.utmp import utmp_record
from tests.support import free_port, wait_until

NOBODY, ROOT = 65534, 0
DEAD_PROCESS = 8


@pytest.fixture
def leader() -> Iterator[subprocess.Popen]:
    """A live session leader (a login shell stands in)."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def terminal() -> Iterator[str]:
    """A real pseudo-terminal, handed to nobody as login would; its name under /dev."""
    main, follower = os.openpty()
    name = os.ttyname(follower).removeprefix("/dev/")
    os.chown(f"/dev/{name}", NOBODY, -1)
    yield name
    os.close(follower)
    os.close(main)


def test_a_live_session_on_the_users_own_terminal_is_presence_with_its_idle_time(
    tmp_path: Path, leader: subprocess.Popen, terminal: str
) -> None:
    used = time.time() - 240
    os.utime(f"/dev/{terminal}", (used, used))  # input four minutes ago
    utmp = tmp_path / "utmp"
    utmp.write_bytes(utmp_record(USER_PROCESS, leader.pid, terminal, "nobody", "10.0.0.7"))
    assert [r.user for r in read_utmp(utmp)] == ["nobody"]

    seen = PresenceReader(utmp=utmp).read([NOBODY])[NOBODY]
    assert seen.user == "nobody" and len(seen.sessions) == 1
    assert seen.sessions[0].terminal == terminal and seen.sessions[0].host == "10.0.0.7"
    assert seen.idle_seconds == pytest.approx(240, abs=5)

    os.utime(f"/dev/{terminal}", None)  # typed just now
    assert PresenceReader(utmp=utmp).read([NOBODY])[NOBODY].idle_seconds < 5


def test_records_that_prove_no_session_are_not_presence(
    tmp_path: Path, leader: subprocess.Popen, terminal: str
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    utmp = tmp_path / "utmp"
    utmp.write_bytes(
        # root's name on nobody's terminal: another uid's session is never root's presence
        utmp_record(USER_PROCESS, leader.pid, terminal, "root")
        # a leader that ended without logging out
        + utmp_record(USER_PROCESS, gone.pid, terminal, "nobody")
        # a logout record, and a line that climbs out of /dev
        + utmp_record(DEAD_PROCESS, leader.pid, terminal, "nobody")
        + utmp_record(USER_PROCESS, leader.pid, "../etc/passwd", "nobody")
        # a user the node does not know
        + utmp_record(USER_PROCESS, leader.pid, terminal, "no-such-user")
        + b"\0" * 100  # a torn record at the end is not read
    )
    seen = PresenceReader(utmp=utmp).read([ROOT, NOBODY])
    assert seen[ROOT].sessions == () and seen[NOBODY].sessions == ()
    assert seen[ROOT].idle_seconds is None
    assert PresenceReader(utmp=tmp_path / "missing").read([NOBODY])[NOBODY].sessions == ()
    assert PresenceReader(utmp=utmp).read([]) == {}


@pytest.fixture
def jupyter(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """A real jupyter_server on loopback: (its pid, its port)."""
    port = free_port()
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
    }
    server = subprocess.Popen(
        [
            sys.executable, "-m", "jupyter_server", "--allow-root", f"--port={port}",
            "--ServerApp.token=t0ken", "--ServerApp.ip=127.0.0.1", "--no-browser",
            f"--ServerApp.root_dir={tmp_path}",
        ],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(
            lambda: any(c.laddr.port == port for c in psutil.Process(server.pid).net_connections()),
            timeout=60,
        )
        yield server.pid, port
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_a_browser_connected_to_the_owners_notebook_server_is_counted(
    tmp_path: Path, jupyter: tuple[int, int]
) -> None:
    pid, port = jupyter
    tables = SocketTables()
    reader = PresenceReader(utmp=tmp_path / "none", sockets=tables)

    def connections() -> int | None:
        """This server's (other tests may run servers of root's meanwhile)."""
        tables.begin()
        try:
            return reader.notebook_servers({ROOT})[(pid, ROOT)]
        finally:
            tables.end()

    assert connections() == 0  # the server listens; no tab is open
    assert isinstance(reader.read([ROOT])[ROOT].notebook_connections, int)  # the sum, known
    blind = PresenceReader(utmp=tmp_path / "none")  # no socket tables: unknown, not none
    assert blind.notebook_servers({ROOT})[(pid, ROOT)] is None
    assert blind.read([ROOT])[ROOT].notebook_connections is None

    async def open_tab() -> None:
        url = f"ws://127.0.0.1:{port}/api/events/subscribe?token=t0ken"
        tab = await websocket_connect(url)
        try:
            deadline = time.monotonic() + 10
            while connections() != 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert connections() == 1  # the tab's websocket, on the server's own port
        finally:
            tab.close()

    asyncio.run(open_tab())
    wait_until(lambda: connections() == 0, timeout=10)  # the tab closed
    assert NOBODY not in reader.read([ROOT])  # only the uids asked; nobody runs no server


def test_the_collector_exports_presence_for_the_uids_holding_gpu_memory(
    sim_node: Path, spawn_workload, tmp_path: Path, leader: subprocess.Popen
) -> None:
    main, follower = os.openpty()
    try:
        name = os.ttyname(follower).removeprefix("/dev/")
        os.chown(f"/dev/{name}", ROOT, -1)
        utmp = tmp_path / "utmp"
        utmp.write_bytes(utmp_record(USER_PROCESS, leader.pid, name, "root", "laptop"))
        busy = spawn_workload(memory="1GiB", phases="busy")
        assert psutil.Process(busy.pid).uids().real == ROOT
        scraper = Scraper(sim_node, utmp=utmp)
        assert scraper.value("gpu_owner_login_sessions", uid=0, user="root") == 1
        assert scraper.value("gpu_owner_terminal_idle_seconds", uid=0, user="root") is not None
        assert scraper.value("gpu_owner_login_sessions", uid=NOBODY, user="nobody") is None
        off = Scraper(sim_node, utmp=utmp, presence=False)
        assert off.value("gpu_owner_login_sessions", uid=0, user="root") is None
    finally:
        os.close(follower)
        os.close(main)


def test_the_servers_walk_is_reused_for_a_while_and_a_gone_server_drops_at_once(
    tmp_path: Path,
) -> None:
    """A scrape does not walk /proc for notebook servers each time: the list is reused for
    SERVERS_MAX_AGE, each entry re-checked by its start ticks."""
    from exporter.presence import SERVERS_MAX_AGE

    script = tmp_path / "jupyter-lab"  # a console script's name is what names a server
    script.write_text("import time\ntime.sleep(120)\n")
    clock = [0.0]
    reader = PresenceReader(utmp=tmp_path / "none", mono=lambda: clock[0])

    def started(proc: subprocess.Popen) -> None:  # its command line readable as the script's
        wait_until(lambda: psutil.Process(proc.pid).cmdline()[-1:] == [str(script)], timeout=10)

    first = subprocess.Popen([sys.executable, str(script)])
    second: subprocess.Popen | None = None
    try:
        started(first)  # before the first walk, which is then kept
        assert (first.pid, ROOT) in reader.notebook_servers({ROOT})
        second = subprocess.Popen([sys.executable, str(script)])
        started(second)
        assert (second.pid, ROOT) not in reader.notebook_servers({ROOT})  # the walk reused
        first.kill()
        first.wait()
        assert (first.pid, ROOT) not in reader.notebook_servers({ROOT})  # gone: dropped now
        clock[0] += SERVERS_MAX_AGE
        assert (second.pid, ROOT) in reader.notebook_servers({ROOT})  # walked again
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.kill()
                proc.wait()
