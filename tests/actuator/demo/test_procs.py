"""The stack's child sessions: one stop reaches everything a child forked, and stopping
many costs the slowest one's time, not the sum."""

from __future__ import annotations

import os
import time
from pathlib import Path

from actuator.demo.procs import Managed, stop_all

# Ignores SIGTERM and forks a child that does too: only SIGKILL to the session ends both.
STUBBORN = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "if os.fork() == 0:\n"
    "    time.sleep(60)\n"
    "time.sleep(60)\n"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _session(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def test_stopping_many_stubborn_sessions_takes_one_timeout_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    import sys

    procs = [
        Managed(f"stubborn-{i}", [sys.executable, "-c", STUBBORN], tmp_path / f"{i}.log").start()
        for i in range(4)
    ]
    deadline = time.monotonic() + 10
    while any(len(_session(p.pid)) < 2 for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(len(_session(p.pid)) == 2 for p in procs)  # each: the leader and its child
    began = time.monotonic()
    stop_all(procs, timeout=1.0)
    took = time.monotonic() - began
    assert took < 3.5, took  # one shared second, not four
    assert not any(_session(p.pid) for p in procs)
    assert not any(_alive(p.pid) for p in procs)


def test_a_session_that_stops_on_sigterm_is_not_killed_or_waited_for(tmp_path: Path) -> None:
    import sys

    quick = Managed("quick", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "q")
    quick.start()
    began = time.monotonic()
    quick.stop(timeout=10)
    assert time.monotonic() - began < 5
    assert quick.process is not None and quick.process.returncode == -15  # SIGTERM ended it
