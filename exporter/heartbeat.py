"""Heartbeat client for training scripts: prove to GPU Reclaimer that this process works.

Standard library only and no project imports, so it can be copied next to a training script::

    from heartbeat import beat          # or: from exporter.heartbeat import beat
    for step, batch in enumerate(loader):
        ...
        beat(step=step)                 # cheap: writes at most once per second

Each process refreshes ``<dir>/<pid-namespace-inode>-<pid>.json`` (``0-<pid>.json`` when the
namespace is unknown) with::

    {"pid": 7, "pid_namespace": 4026532000, "start_ticks": 123456,
     "timestamp": 1700000000.0, "epoch": 3, "step": 1200}

``pid`` is the PID this process sees (its container PID in a container), ``start_ticks`` is
field 22 of /proc/self/stat (it tells a live process from a dead one whose PID was reused).
``close()`` removes the file (and is run at exit); where it cannot, it writes the record
with ``"closed": true``, which readers ignore: a heartbeat exists only while the work does.
The directory comes from ``GPU_RECLAIMER_HEARTBEAT_DIR``, else /run/gpu-reclaimer/heartbeats;
mount it into containers at the same place. A heartbeat never raises: a full disk or a
missing directory must not crash a training run.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import tempfile
import threading
import time

ENV_DIR = "GPU_RECLAIMER_HEARTBEAT_DIR"
DEFAULT_DIR = "/run/gpu-reclaimer/heartbeats"

_log = logging.getLogger(__name__)


class Heartbeat:
    """Refreshes this process's heartbeat file, at most once per ``min_interval`` seconds."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, *, min_interval: float = 1.0
    ) -> None:
        if directory is None:
            directory = os.environ.get(ENV_DIR) or DEFAULT_DIR
        self.directory = os.fspath(directory)
        self.min_interval = min_interval
        self.epoch: int | None = None
        self.step: int | None = None
        self._pid: int | None = None  # the process the identity below belongs to
        self._namespace: int | None = None
        self._start_ticks: int | None = None
        self._last_attempt = float("-inf")
        self._warned = False
        self._exit_registered = False

    @property
    def path(self) -> str:
        """The file this process writes."""
        self._refresh_identity()
        return os.path.join(self.directory, f"{self._namespace or 0}-{self._pid}.json")

    def beat(
        self, *, epoch: int | None = None, step: int | None = None, force: bool = False
    ) -> bool:
        """Record progress and refresh the file unless refreshed recently; True if written.

        ``None`` keeps the last epoch / step given; ``force`` ignores ``min_interval``.
        """
        # No lock: two threads racing here write twice, each write atomic; a lock could
        # be inherited held by a forked DataLoader worker and hang it.
        self._refresh_identity()
        if epoch is not None:
            self.epoch = epoch
        if step is not None:
            self.step = step
        now = time.monotonic()
        if not force and now - self._last_attempt < self.min_interval:
            return False
        # Failures count as attempts too: a broken disk is not retried on every batch.
        self._last_attempt = now
        try:
            self._write()
        except Exception as error:  # whatever it is, the training run must go on
            self._warn_once(error)
            return False
        return True

    def close(self) -> None:
        """Remove this process's heartbeat file; a later ``beat()`` writes it again. Where
        it cannot be removed, it is marked closed (readers ignore a closed heartbeat)."""
        self._last_attempt = float("-inf")
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except Exception:  # cannot remove it: say it is over instead, or give up quietly
            with contextlib.suppress(Exception):
                self._write(closed=True)

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _refresh_identity(self) -> None:
        # Re-read after a fork: the child is another process with its own file.
        pid = os.getpid()
        if pid != self._pid:
            self._pid = pid
            self._namespace = _pid_namespace()
            self._start_ticks = _start_ticks()
            self._last_attempt = float("-inf")

    def _write(self, *, closed: bool = False) -> None:
        path = self.path
        if not closed and not self._exit_registered:
            # A clean exit leaves no heartbeat behind to go stale.
            atexit.register(self.close)
            self._exit_registered = True
        record: dict[str, object] = {
            "pid": self._pid,
            "pid_namespace": self._namespace,
            "start_ticks": self._start_ticks,
            "timestamp": time.time(),
            "epoch": self.epoch,
            "step": self.step,
        }
        if closed:  # the activity is over (the file could not be removed)
            record["closed"] = True
        os.makedirs(self.directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=self.directory)
        try:
            # The exporter may run as another user: let it read the file.
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "w") as f:
                json.dump(record, f, default=_number)
            os.replace(tmp, path)  # readers see the old or the new file, never half of one
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _warn_once(self, error: Exception) -> None:
        if not self._warned:
            self._warned = True
            _log.warning("heartbeat: cannot write to %s: %s", self.directory, error)


def _number(value: object) -> int | float | None:
    """numpy / torch scalars as plain numbers; anything else as null, never an error."""
    for kind in (int, float):
        try:
            return kind(value)  # type: ignore[call-overload, arg-type]
        except (TypeError, ValueError, OverflowError):
            pass
    return None


def _pid_namespace() -> int | None:
    """Inode of this process's PID namespace, from the link text 'pid:[4026531836]'."""
    try:
        link = os.readlink("/proc/self/ns/pid")
        return int(link[link.index("[") + 1 : link.index("]")])
    except (OSError, ValueError):
        return None


def _start_ticks() -> int | None:
    """Start time in clock ticks since boot: field 22 of /proc/self/stat."""
    try:
        with open("/proc/self/stat", "rb") as f:
            raw = f.read()
        # The command name (field 2) may hold spaces and ')': split after the last ')'.
        return int(raw[raw.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


_default: Heartbeat | None = None
_default_lock = threading.Lock()


def beat(*, epoch: int | None = None, step: int | None = None) -> bool:
    """``Heartbeat().beat(...)`` on a per-process default heartbeat, created on first use."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Heartbeat()  # removed at exit once written
    return _default.beat(epoch=epoch, step=step)
