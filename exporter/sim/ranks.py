"""A simulated rank of a distributed training: the sockets its collectives hold, and nothing
moving on them while it is idle or hung.

`sim run --rank` listens as NCCL's bootstrap does (every interface, a port bound to 0: the
kernel picks it from the ephemeral range, peers are told it); `--rank-store PORT` listens
on every interface at PORT as PyTorch's TCPStore does on rank 0 (start it with
MASTER_PORT=PORT in its environment, as torchrun and `init_process_group` do);
`--rank-peer PORT` holds a silent connection to another rank's listener on this node. Each
listener accepts its peers and keeps their connections open without a byte, as a rank
that waits in a collective does.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class RankSockets:
    """The listeners and peer connections of one simulated rank (threads accept)."""

    def __init__(self, store_port: int | None = None, peer_port: int | None = None) -> None:
        self.listeners = [_listen(0)]
        if store_port is not None:
            self.listeners.append(_listen(store_port))
        self.held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._peer_port = peer_port

    @property
    def bootstrap_port(self) -> int:
        return int(self.listeners[0].getsockname()[1])

    def start(self) -> None:
        for listener in self.listeners:
            threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        if self._peer_port is not None:
            self._hold(socket.create_connection(("127.0.0.1", self._peer_port), timeout=10))

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            self._hold(conn)

    def _hold(self, conn: socket.socket) -> None:
        with self._lock:
            self.held.append(conn)

    def close(self) -> None:
        with self._lock:
            for sock in [*self.held, *self.listeners]:
                with contextlib.suppress(OSError):
                    # A close alone leaves a listener blocked in accept() listening.
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
            self.held = []


def _listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port))  # every interface, as TCPStore binds whatever MASTER_ADDR says
    sock.listen()
    return sock
