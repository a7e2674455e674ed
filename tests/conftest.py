"""Shared fixtures: simulated GPU nodes and real workload processes on them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.sim.state import init_node, read_procs
from exporter.sim.workload import sim_run_args
from tests.support import Children, GiB, gpu_reclaimer_command, wait_until

# Under `pytest -n N` (pytest-xdist, as `make test` runs) each test module runs whole on one
# worker: its module-scoped stacks start once and its tests keep their order. Modules that
# share something of the host run on one worker, one after another: Slurm's munged listens
# on the standard socket.
SHARED_HOST_GROUPS = {"tests/slurm/": "slurm"}


def worker_scope(nodeid: str) -> str:
    """The unit of work a worker takes whole: the test's module, or its shared group."""
    module = nodeid.split("::", 1)[0]
    return next(
        (g for prefix, g in SHARED_HOST_GROUPS.items() if module.startswith(prefix)), module
    )


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: known only where it is installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_scope(nodeid)

    return ModuleScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Our own processes (exporters, actuators started by tests) record themselves here,
    not in the machine's /run/gpu-reclaimer; subprocesses inherit the variable."""
    from exporter.ownprocs import RUNTIME_DIR_ENV

    directory = tmp_path_factory.mktemp("runtime")
    previous = os.environ.get(RUNTIME_DIR_ENV)
    os.environ[RUNTIME_DIR_ENV] = str(directory)
    yield directory
    if previous is None:
        os.environ.pop(RUNTIME_DIR_ENV, None)
    else:
        os.environ[RUNTIME_DIR_ENV] = previous


@pytest.fixture
def sim_node(tmp_path: Path) -> Path:
    directory = tmp_path / "node"
    init_node(directory, gpus=2, memory_total=80 * GiB, name="NVIDIA H100 80GB HBM3")
    return directory


SpawnWorkload = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spawn_workload(sim_node: Path, tmp_path: Path) -> Iterator[SpawnWorkload]:
    """Start `gpu-reclaimer sim run` processes; waits until each reports; kills them after."""
    started: list[subprocess.Popen[bytes]] = []

    def spawn(
        *options: str,
        gpu: int = 0,
        memory: str = "4GiB",
        phases: str = "busy",
        node: Path | None = None,
        stdout: int | object = subprocess.DEVNULL,
        wait: bool = True,
    ) -> subprocess.Popen[bytes]:
        directory = node or sim_node
        command = [
            *gpu_reclaimer_command(),
            *sim_run_args(directory, gpu=gpu, memory=memory, phases=phases, tick="0.2"),
            *options,
        ]
        # stderr is not pytest's captured stderr: a regular file the test process logs to,
        # whose writes would read as this workload's log activity (progress).
        process = subprocess.Popen(  # type: ignore[call-overload]
            command, stdout=stdout, stderr=subprocess.DEVNULL, start_new_session=True
        )
        started.append(process)
        if wait:
            wait_until(lambda: any(p.pid == process.pid for p in read_procs(directory)))
        return process

    yield spawn
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture
def children() -> Iterator[Children]:
    """Start real child processes; all are killed and reaped when the test ends."""
    started = Children()
    yield started
    started.stop_all()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One real PostgreSQL server for the session; each test takes a new database. Its
    data lives outside pytest's own folder, which pytest may close to other users again
    (the server runs as the postgres account)."""
    import tempfile

    from tests.helpers.postgres import postgres_server

    with (
        tempfile.TemporaryDirectory(prefix="gpu-reclaimer-pg-") as base,
        postgres_server(Path(base) / "postgres") as server,
    ):
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store's database on each backend: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "db.sqlite")
    return str(request.getfixturevalue("pg_server").new_database())
