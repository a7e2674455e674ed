"""A Unix socket that answers as a scripted server would (a client's tests)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any


class ScriptedSocket:
    """A Unix socket that reads one request line and writes the scripted answer lines."""

    def __init__(self, path: Path, *answers: bytes) -> None:
        self.path, self.answers = path, answers
        self.requests: list[dict[str, Any]] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            self.requests.append(json.loads(conn.makefile("rb").readline()))
            for answer in self.answers:
                conn.sendall(answer)

    def close(self) -> None:
        self.server.close()


def json_line(**answer: Any) -> bytes:
    """One answer as the actuator's socket writes it: a JSON object and a newline."""
    return json.dumps(answer).encode() + b"\n"
