"""`gpu-reclaimer demo --check`: the demo's own cast, start to finish, as a user runs it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
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
    leftovers = subprocess.run(
        ["pgrep", "-f", str(run_dir)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert leftovers == [], leftovers


def test_ctrl_c_stops_everything_and_exits_0(system_tools: None, tmp_path: Path) -> None:
    """`make demo` then Ctrl-C: a clean stop is exit 0 (make prints no "Error 130")."""
    command = [*gpu_reclaimer_command(), "demo", "--workdir", str(tmp_path)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    assert process.stdout is not None
    seen = []
    try:
        for raw in process.stdout:  # wait until the stack is up and the view draws
            seen.append(raw.decode(errors="replace"))
            if "stack up" in seen[-1]:
                break
        os.killpg(process.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    text = "".join(seen) + rest.decode(errors="replace")
    assert process.returncode == 0, text
    assert "every process the demo started is gone" in text, text
    (run_dir,) = tmp_path.iterdir()
    leftovers = subprocess.run(
        ["pgrep", "-f", str(run_dir)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert leftovers == [], leftovers


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
    tmp_path = open_workdir
    command = [*gpu_reclaimer_command(), "demo", "--day", "--modes", "observe"]
    process = subprocess.Popen(
        [*command, "--workdir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert process.stdout is not None
    seen = []
    try:
        for raw in process.stdout:
            seen.append(raw.decode(errors="replace"))
            if "stack up in" in seen[-1]:
                break
        process.send_signal(signal.SIGTERM)  # the process alone, not its group
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    text = "".join(seen) + rest.decode(errors="replace")
    assert process.returncode == 0, text
    assert "every process the demo started is gone" in text, text
    (run_dir,) = tmp_path.iterdir()
    leftovers = subprocess.run(
        ["pgrep", "-f", str(run_dir)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert leftovers == [], leftovers
