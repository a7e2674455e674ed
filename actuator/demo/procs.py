"""Child processes the stack owns: each in its own session, so one `killpg` stops it and
everything it forked (gunicorn workers, a workload's DataLoader-like children)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class Managed:
    """One command run in its own session, output appended to `log`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
        *,
        reap: bool = False,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.env = dict(env) if env is not None else None
        # Reap at once: a zombie keeps /proc/PID (and so its simulated GPU memory) around.
        self.reap = reap
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was never started"
        return self.process.pid

    def start(self) -> Managed:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        if self.reap:
            threading.Thread(
                target=self.process.wait, name=f"reap-{self.name}", daemon=True
            ).start()
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the session, SIGKILL what is left after `timeout` (idempotent)."""
        stop_all([self], timeout)

    def terminate(self) -> None:
        """SIGTERM the session (`finish` waits for it)."""
        if self.process is not None:
            _signal_group(self.process.pid, signal.SIGTERM)

    def finish(self, timeout: float) -> None:
        """Wait up to `timeout` for the leader, then SIGKILL whatever of the session is left."""
        process = self.process
        if process is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, timeout))
        # The leader may be gone while members of its group live on: kill those too.
        _signal_group(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)

    def kill(self) -> None:
        """SIGKILL the whole session at once, like a crash."""
        if self.process is not None:
            _signal_group(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def stop_all(processes: Sequence[Managed], timeout: float) -> None:
    """SIGTERM every session at once, then SIGKILL what is left after one shared `timeout`:
    stopping a stack takes its slowest part's time, not the sum of all of them."""
    for managed in processes:
        managed.terminate()
    deadline = time.monotonic() + timeout
    for managed in processes:
        managed.finish(deadline - time.monotonic())
