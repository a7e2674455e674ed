"""A real PostgreSQL server on loopback for a run (chaos, the tests, the fleet benchmark):
Debian's `postgresql` binaries, initdb + pg_ctl into a directory of its own, run as an
unprivileged user (the `postgres` account as root, since initdb refuses root), with a
restart that drops every connection the way a crash does."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.argtypes import CommandError


class PostgresError(CommandError):
    """PostgreSQL is not installed, or would not start (the message says which, and how)."""


def pg_bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise PostgresError(f"{name} not found: install Debian's postgresql (make test-deps)")
    return found


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class PgServer:
    port: int
    data: Path
    base: Path
    run_as: dict[str, Any] = field(default_factory=dict)

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} "
            f"-c unix_socket_directories={self.data} "
            "-c fsync=on -c max_connections=200 -c shared_buffers=64MB"
        )
        started = subprocess.run(
            [
                pg_bin("pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                options,
                "-l",
                str(self.base / "postgres.log"),
                "-w",
                "-t",
                "60",
                "start",
            ],
            capture_output=True,
            text=True,
            cwd=self.base,
            **self.run_as,
        )
        if started.returncode != 0:
            log = (self.base / "postgres.log").read_text(errors="replace")[-2000:]
            raise PostgresError(f"pg_ctl start failed: {started.stderr}\n{log}")

    def stop(self) -> None:
        """Immediate: every connection dropped, no checkpoint (recovery at the next start)."""
        subprocess.run(
            [pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            **self.run_as,
        )

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def postgres_server(base: Path) -> Iterator[PgServer]:
    user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    base.mkdir(parents=True, exist_ok=True)
    data = base / "pgdata"
    if os.geteuid() == 0:
        info = pwd.getpwnam(user)
        os.chown(base, info.pw_uid, info.pw_gid)
        for parent in base.parents:  # the unprivileged user must reach its data directory
            if parent == Path("/"):
                break
            mode = parent.stat().st_mode
            if not mode & 0o001:
                parent.chmod(mode | 0o001)
    # uid, gid and groups all dropped: with root's gid left, a 0701 root-owned parent would
    # deny through its group bits.
    run_as: dict[str, Any] = (
        {"user": user, "group": user, "extra_groups": []} if (os.geteuid() == 0) else {}
    )
    initdb = subprocess.run(
        [
            pg_bin("initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-instructions",
        ],
        capture_output=True,
        text=True,
        cwd=base,
        **run_as,
    )
    if initdb.returncode != 0:
        raise PostgresError(f"initdb failed: {initdb.stderr[-2000:]}")
    server = PgServer(_free_port(), data, base, run_as)
    server.start()
    try:
        yield server
    finally:
        server.stop()
