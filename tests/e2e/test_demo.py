"""`gpu-reclaimer demo --check`: the demo's own cast, start to finish, as a user runs it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import gpu_reclaimer_command

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_demo_check_reaches_every_expected_outcome(system_tools: None, tmp_path: Path) -> None:
    command = [
        *gpu_reclaimer_command(),
        "demo",
        "--check",
        "--timeout",
        "150",
        "--workdir",
        str(tmp_path),
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            # SIGTERM lets the demo stop what it started; then nothing of it may remain.
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    assert "demo check passed" in text, text
    for outcome in ("✓ untouched", "✓ reclaimed", "✓ protected", "✓ killed"):
        assert outcome in text, text
    # Every service and workload it started is gone, and their logs are kept.
    (run_dir,) = tmp_path.iterdir()
    assert {p.name for p in (run_dir / "logs").iterdir()} >= {"exporter.log", "actuator.log"}
    assert _left_running(tmp_path) == []


def _stopped_once_up(
    command: list[str], stop: Callable[[subprocess.Popen[bytes]], None]
) -> tuple[int, str]:
    """Start `command`, `stop` it once its stack is up; its exit status and output."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    assert process.stdout is not None
    seen = []
    try:
        for raw in process.stdout:  # wait until the stack is up
            seen.append(raw.decode(errors="replace"))
            if "stack up" in seen[-1]:
                break
        stop(process)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    return process.returncode, "".join(seen) + rest.decode(errors="replace")


def _left_running(workdir: Path) -> list[str]:
    """PIDs of processes still naming the one run directory under `workdir`."""
    (run_dir,) = workdir.iterdir()
    return subprocess.run(
        ["pgrep", "-f", str(run_dir)], capture_output=True, text=True, check=False
    ).stdout.split()


def test_ctrl_c_stops_everything_and_exits_0(system_tools: None, tmp_path: Path) -> None:
    """`make demo` then Ctrl-C: a clean stop is exit 0 (make prints no "Error 130")."""
    command = [*gpu_reclaimer_command(), "demo", "--workdir", str(tmp_path)]
    # What the terminal sends on Ctrl-C: SIGINT to the whole group.
    code, text = _stopped_once_up(command, lambda p: os.killpg(p.pid, signal.SIGINT))
    assert code == 0, text
    assert "every process the demo started is gone" in text, text
    assert _left_running(tmp_path) == []


@pytest.fixture
def open_workdir() -> Iterator[Path]:
    """A run directory the day's accounts can reach, where they exist (pytest's is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="gpu-reclaimer-day-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_day_stopped_by_sigterm_stops_everything_it_started(
    system_tools: None, open_workdir: Path
) -> None:
    """`kill PID` (or systemd, or `timeout`) on a simulated day: its stack goes with it."""
    command = [*gpu_reclaimer_command(), "demo", "--day", "--modes", "observe"]
    # SIGTERM to the process alone, not its group.
    code, text = _stopped_once_up(
        [*command, "--workdir", str(open_workdir)], lambda p: p.send_signal(signal.SIGTERM)
    )
    assert code == 0, text
    assert "every process the demo started is gone" in text, text
    assert _left_running(open_workdir) == []
