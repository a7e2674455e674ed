"""A simulated rank's sockets (exporter/sim/ranks.py), as the exporter's socket reader sees
them: a bootstrap listener on a kernel-picked port of every interface, a store listener at
MASTER_PORT, silent peer connections held open, and nothing left after close."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from exporter.netdiag import SocketTables
from exporter.sim.ranks import RankSockets
from tests.support import free_port


def ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def own_inodes() -> set[int]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def wait_until(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_rank_listens_where_nccl_and_tcpstore_do_and_holds_silent_peers() -> None:
    store_port = free_port()
    rank0 = RankSockets(store_port=store_port)
    rank0.start()
    rank1 = RankSockets(peer_port=store_port)
    try:
        rank1.start()  # its peer connection to rank 0's store
        low, high = ephemeral_range()
        assert low <= rank0.bootstrap_port <= high  # bound to 0: the kernel picked it
        wait_until(lambda: len(rank0.held) == 1)  # rank 0 accepted and holds the peer
        tables = SocketTables()
        try:
            mine = tables.of(os.getpid(), own_inodes())
        finally:
            tables.close()
        listening = {s.port: s for s in mine.values() if s.listening}
        for port in (rank0.bootstrap_port, store_port, rank1.bootstrap_port):
            assert port in listening and not listening[port].loopback  # every interface
        connected = [s for s in mine.values() if not s.listening and s.port == store_port]
        assert connected and all(s.moved == 0 for s in connected)  # not a byte either way
    finally:
        rank1.close()
        rank0.close()
    assert rank0.held == [] and all(s.fileno() == -1 for s in rank0.listeners)
    with socket.create_server(("0.0.0.0", store_port)):  # the store port is free again
        pass
