"""A real PostgreSQL server on loopback for one test session: Debian's `postgresql`
binaries, initdb + pg_ctl into a temporary directory, run as an unprivileged user (the
`postgres` account when the tests run as root, as initdb refuses root)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import free_port


def pg_bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        pytest.fail(f"{name} not found: install Debian's postgresql (make system-deps)")
    return found


@dataclass
class PgServer:
    port: int
    data: Path

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)


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
    subprocess.run(
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
        check=True,
        capture_output=True,
        cwd=base,
        **run_as,
    )
    port = free_port()
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={data} "
        "-c fsync=on -c max_connections=200 -c shared_buffers=64MB"
    )
    started = subprocess.run(
        [
            pg_bin("pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(base / "postgres.log"),
            "-w",
            "-t",
            "60",
            "start",
        ],
        capture_output=True,
        text=True,
        cwd=base,
        **run_as,
    )
    if started.returncode != 0:
        log = (base / "postgres.log").read_text(errors="replace")[-2000:]
        raise AssertionError(f"pg_ctl start failed: {started.stderr}\n{log}")
    try:
        yield PgServer(port, data)
    finally:
        subprocess.run(
            [pg_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            **run_as,
        )
