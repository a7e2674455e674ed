"""Signals through pidfds: once a pidfd is open and its process's start ticks verified,
the fd is bound to that process and a reused PID can no longer be hit."""

from __future__ import annotations

import logging
import os
import select
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from actuator.models import Member, SignalResult
from exporter import procfs

log = logging.getLogger(__name__)


class Pidfds:
    """The open pidfds of the processes being escalated (one per (pid, start ticks))."""

    def __init__(self, proc_root: Path = procfs.PROC) -> None:
        self.proc_root = proc_root
        self._fds: dict[tuple[int, int], int] = {}

    def matches(self, member: Member) -> bool:
        """The PID names this very process now (same start ticks, not a zombie)."""
        stat = procfs.read_stat(member.pid, self.proc_root)
        return stat is not None and stat.start_ticks == member.start_ticks and not stat.is_zombie

    def open(self, member: Member) -> int | None:
        key = (member.pid, member.start_ticks)
        fd = self._fds.get(key)
        if fd is not None:
            return fd
        try:
            fd = os.pidfd_open(member.pid)
        except OSError:
            return None
        # The fd refers to whatever had this PID when it was opened: if that process has
        # the start ticks we recorded, the fd is bound to our process from now on.
        if not self.matches(member):
            os.close(fd)
            return None
        self._fds[key] = fd
        return fd

    def forget(self, member: Member) -> None:
        fd = self._fds.pop((member.pid, member.start_ticks), None)
        if fd is not None:
            os.close(fd)

    def alive(self, members: Iterable[Member]) -> list[Member]:
        out = []
        for m in members:
            fd = self.open(m)
            if fd is None:
                self.forget(m)
                continue
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if poller.poll(0) or not self.matches(m):
                self.forget(m)  # exited (or a zombie)
                continue
            out.append(m)
        return out

    def wait_exit(self, timeout: float) -> None:
        """Block until one tracked process exits or `timeout` passes."""
        if not self._fds:
            time.sleep(timeout)
            return
        poller = select.poll()
        for fd in self._fds.values():
            poller.register(fd, select.POLLIN)
        poller.poll(max(0, int(timeout * 1000)))

    def send(self, member: Member, sig: signal.Signals, *, dry_run: bool) -> SignalResult:
        """The one function that signals a process: through a verified pidfd, or a dry run.

        SIGTERM is followed by SIGCONT, so a stopped process gets to handle it (as systemd
        does)."""
        if dry_run:
            log.info("DRY-RUN: would send %s to pid %d", sig.name, member.pid)
            return SignalResult(member.pid, sig.name, False, "dry run")
        fd = self.open(member)
        if fd is None:
            return SignalResult(member.pid, sig.name, False, "gone or identity changed")
        try:
            signal.pidfd_send_signal(fd, sig)
            if sig == signal.SIGTERM:
                signal.pidfd_send_signal(fd, signal.SIGCONT)
        except ProcessLookupError:
            return SignalResult(member.pid, sig.name, False, "already exited")
        except OSError as exc:
            return SignalResult(member.pid, sig.name, False, f"error: {exc.strerror or exc}")
        log.warning("sent %s to pid %d", sig.name, member.pid)
        return SignalResult(member.pid, sig.name, True)
