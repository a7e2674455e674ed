"""The actuator's hands on a GPU node: live re-checks and signals.

`Node` is the narrow interface the reconciler uses. `LocalNode` implements it for the node
the actuator runs on (NVML or the simulated NVML, psutil, /proc, pidfds). A remote node agent
will implement the same interface over authenticated HTTP.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import re
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import psutil

from actuator.models import Member, Target
from actuator.policy import Protect
from exporter.identity import command_name

log = logging.getLogger(__name__)
T = TypeVar("T")

# Our own processes, whatever the policy says.
_OWN_COMMAND = re.compile(r"(gpu-reclaimer|exporter\.cli)\s+(exporter|agent|actuator|demo)\b")
_PF_KTHREAD = 0x00200000
NVML_TIMEOUT = 2.0


class NvmlUnknown(Exception):
    """An NVML answer we cannot trust (error, unsupported, timed out): evidence unknown."""


@dataclass(frozen=True)
class LiveState:
    """What a re-check saw; None means unknown (never treated as idle)."""

    sampled_at: float
    exists: bool
    start_time: float | None = None
    uid: int | None = None
    user: str | None = None
    groups: tuple[str, ...] = ()
    command: str = ""
    protected: str | None = None
    gpu_found: bool | None = None
    on_gpu: bool | None = None
    gpu_memory_bytes: int | None = None
    sm_util: float | None = None
    cpu_seconds: float | None = None
    log_mtime: float | None = None
    members: tuple[Member, ...] = ()
    errors: tuple[str, ...] = ()

    def evidence(self) -> dict[str, Any]:
        return {
            "exists": self.exists,
            "start_time": self.start_time,
            "uid": self.uid,
            "user": self.user,
            "command": self.command,
            "protected": self.protected,
            "on_gpu": self.on_gpu,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "sm_util": self.sm_util,
            "cpu_seconds": self.cpu_seconds,
            "log_mtime": self.log_mtime,
            "members": [m.pid for m in self.members],
            "errors": list(self.errors),
        }


@dataclass(frozen=True)
class SignalResult:
    pid: int
    signal: str
    sent: bool
    detail: str = ""


class Node(Protocol):
    name: str

    def inspect(self, target: Target) -> LiveState: ...

    def alive(self, members: Iterable[Member]) -> list[Member]: ...

    def gpu_processes(self, uuid: str) -> dict[int, int] | None: ...

    def monitored_count(self) -> int | None: ...

    def signal_tree(
        self, target: Target, members: Iterable[Member], sig: signal.Signals, *, dry_run: bool
    ) -> list[SignalResult]: ...

    def wait_exit(self, timeout: float) -> None: ...


@dataclass
class _ProtectionCache:
    at: float = 0.0
    keys: frozenset[tuple[int, float]] = frozenset()
    lock: threading.Lock = field(default_factory=threading.Lock)


def command_names(proc: psutil.Process) -> tuple[str, ...]:
    """Names a protected-command regex is matched against: executable, argv[0], and for
    Python the module of `-m MOD` or the script's name."""
    names: list[str] = []
    try:
        cmdline = proc.cmdline()
    except (psutil.Error, OSError):
        cmdline = []
    with contextlib.suppress(psutil.Error, OSError):
        names.append(proc.name())
    try:
        exe = proc.exe()
        if exe:
            names.append(os.path.basename(exe))
    except (psutil.Error, OSError):
        pass
    if cmdline:
        names.append(os.path.basename(cmdline[0]))
        names.append(command_name(cmdline))  # the module or script when Python runs it
    return tuple(dict.fromkeys(n for n in names if n))


def is_kernel_thread(pid: int) -> bool:
    if pid in (0, 2):
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        flags = int(fields[6])  # field 9 of stat; fields[0] is field 3 (state)
    except (IndexError, ValueError):
        return False
    return bool(flags & _PF_KTHREAD)


class LocalNode:
    """The node this process runs on."""

    def __init__(
        self,
        name: str,
        protect: Protect,
        *,
        nvml: Any | None = None,
        sim_dir: str | None = None,
        sm_window: float = 10.0,
        start_time_tolerance: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.protect = protect
        self.sm_window = sm_window
        self.tolerance = start_time_tolerance
        self.clock = clock
        self._patterns = [re.compile(p) for p in protect.commands]
        self._nvml = nvml
        self._sim_dir = sim_dir
        self._nvml_ready = False
        self._nvml_lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nvml")
        self._uuid_index: dict[str, int] = {}
        self._pidfds: dict[tuple[int, float], int] = {}
        self._protected = _ProtectionCache()

    # -- NVML ----------------------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        """Run one NVML interaction with a deadline; any error or hang -> NvmlUnknown."""
        future = self._executor.submit(fn)
        try:
            return future.result(timeout=NVML_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise NvmlUnknown("NVML call timed out") from None
        except NvmlUnknown:
            raise
        except Exception as exc:  # NVMLError and anything a broken driver throws
            raise NvmlUnknown(f"NVML: {type(exc).__name__}: {exc}") from None

    def _lib(self) -> Any:
        with self._nvml_lock:
            if self._nvml is None:
                from exporter.nvml import open_nvml

                self._nvml = open_nvml(self._sim_dir)
            if not self._nvml_ready:
                self._nvml.nvmlInit()
                self._nvml_ready = True
            return self._nvml

    def _handle(self, lib: Any, uuid: str) -> Any | None:
        index = self._uuid_index.get(uuid)
        if index is not None:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            if lib.nvmlDeviceGetUUID(handle) == uuid:
                return handle
        self._uuid_index.clear()
        found = None
        for i in range(lib.nvmlDeviceGetCount()):
            handle = lib.nvmlDeviceGetHandleByIndex(i)
            u = lib.nvmlDeviceGetUUID(handle)
            self._uuid_index[u] = i
            if u == uuid:
                found = handle
        return found

    def _gpu_view(self, uuid: str, pids: set[int]) -> tuple[bool, dict[int, int], float | None]:
        """(gpu found, {pid: bytes} of all listed processes, max SM util of `pids`)."""

        def query() -> tuple[bool, dict[int, int], float | None]:
            lib = self._lib()
            handle = self._handle(lib, uuid)
            if handle is None:
                return False, {}, None
            listed = {
                int(p.pid): int(p.usedGpuMemory or 0)
                for p in lib.nvmlDeviceGetComputeRunningProcesses(handle)
            }
            since = int((self.clock() - self.sm_window) * 1_000_000)
            util: float | None
            try:
                samples = lib.nvmlDeviceGetProcessUtilization(handle, since)
                util = max((s.smUtil for s in samples if int(s.pid) in pids), default=0) / 100
            except Exception as exc:
                # NOT_FOUND: no process did any work in the window (supported, so 0).
                util = 0.0 if type(exc).__name__ == "NVMLError_NotFound" else None
            return True, listed, util

        return self._call(query)

    def gpu_processes(self, uuid: str) -> dict[int, int] | None:
        try:
            found, listed, _ = self._gpu_view(uuid, set())
        except NvmlUnknown:
            return None
        return listed if found else None

    def monitored_count(self) -> int | None:
        def query() -> int:
            lib = self._lib()
            pids: set[int] = set()
            for i in range(lib.nvmlDeviceGetCount()):
                handle = lib.nvmlDeviceGetHandleByIndex(i)
                pids.update(int(p.pid) for p in lib.nvmlDeviceGetComputeRunningProcesses(handle))
            return len(pids)

        try:
            return self._call(query)
        except NvmlUnknown:
            return None

    # -- protection ----------------------------------------------------------------------

    def _always_protected(self) -> frozenset[tuple[int, float]]:
        """PID 1, this process, our exporter/agent/actuator and all their ancestors."""
        cache = self._protected
        now = time.monotonic()
        with cache.lock:
            if now - cache.at < 10.0 and cache.keys:
                return cache.keys
            roots: list[psutil.Process] = [psutil.Process(os.getpid())]
            for proc in psutil.process_iter(["cmdline"]):
                try:
                    if _OWN_COMMAND.search(" ".join(proc.info["cmdline"] or ())):
                        roots.append(proc)
                except (psutil.Error, TypeError):
                    continue
            keys: set[tuple[int, float]] = set()
            for proc in roots:
                try:
                    chain = [proc, *proc.parents()]
                except psutil.Error:
                    continue
                for p in chain:
                    try:
                        keys.add((p.pid, p.create_time()))
                    except psutil.Error:
                        continue
            cache.keys = frozenset(keys)
            cache.at = now
            return cache.keys

    def protection_reason(self, proc: psutil.Process) -> str | None:
        """Why this process must never be signalled, or None."""
        pid = proc.pid
        if pid <= 1:
            return "pid 1"
        if is_kernel_thread(pid):
            return "kernel thread"
        try:
            key = (pid, proc.create_time())
            uid = proc.uids().real
            user = proc.username()
        except psutil.Error as exc:
            return f"cannot read process: {type(exc).__name__}"
        if key in self._always_protected():
            return "gpu-reclaimer process or its ancestor"
        if self.protect.protect_root and uid == 0:
            return "root"
        if uid < self.protect.protected_uid_below:
            return f"uid {uid} < {self.protect.protected_uid_below}"
        if user in self.protect.users:
            return f"protected user {user}"
        for name in command_names(proc):
            for pattern in self._patterns:
                if pattern.fullmatch(name):
                    return f"protected command {name!r} (pattern {pattern.pattern!r})"
        return None

    # -- inspection ----------------------------------------------------------------------

    def _process(self, pid: int, start_time: float) -> psutil.Process | None:
        """The live, non-zombie process with this pid *and* start time, else None."""
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            if abs(proc.create_time() - start_time) > self.tolerance:
                return None
            return proc
        except psutil.Error:
            return None

    def inspect(self, target: Target) -> LiveState:
        now = self.clock()
        errors: list[str] = []
        try:
            proc = psutil.Process(target.pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return LiveState(sampled_at=now, exists=False)
            with proc.oneshot():
                start_time = proc.create_time()
                uid = proc.uids().real
                user = proc.username()
                gid = proc.gids().real
        except psutil.NoSuchProcess:
            return LiveState(sampled_at=now, exists=False)
        except psutil.Error as exc:
            return LiveState(sampled_at=now, exists=True, errors=(f"psutil: {exc}",))
        try:
            groups = tuple(_group_names(user, gid))
        except (KeyError, OSError):
            groups = ()
        command = " ".join(command_names(proc))
        if abs(start_time - target.start_time) > self.tolerance:
            # Another process now has this PID: look no further, touch nothing.
            return LiveState(
                sampled_at=now, exists=True, start_time=start_time, uid=uid, user=user,
                command=command,
            )  # fmt: skip
        protected = self.protection_reason(proc)
        members: list[Member] = []
        cpu = 0.0
        try:
            tree = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            tree = [proc]
        for p in tree:
            try:
                with p.oneshot():
                    if p.status() == psutil.STATUS_ZOMBIE:
                        continue
                    times = p.cpu_times()
                    cpu += times.user + times.system
                    members.append(Member(p.pid, p.create_time(), p.uids().real))
            except psutil.Error:
                continue
        pids = {m.pid for m in members}
        gpu_found: bool | None = None
        on_gpu: bool | None = None
        mem: int | None = None
        util: float | None = None
        try:
            gpu_found, listed, util = self._gpu_view(target.uuid, pids)
            if gpu_found:
                held = {pid: b for pid, b in listed.items() if pid in pids}
                on_gpu = bool(held)
                mem = sum(held.values())
        except NvmlUnknown as exc:
            errors.append(str(exc))
        return LiveState(
            sampled_at=now,
            exists=True,
            start_time=start_time,
            uid=uid,
            user=user,
            groups=groups,
            command=command,
            protected=protected,
            gpu_found=gpu_found,
            on_gpu=on_gpu,
            gpu_memory_bytes=mem,
            sm_util=util,
            cpu_seconds=cpu,
            log_mtime=_log_mtime(members),
            members=tuple(members),
            errors=tuple(errors),
        )

    # -- signals -------------------------------------------------------------------------

    def _pidfd(self, member: Member) -> int | None:
        """A pidfd pinned to exactly this process (start time verified after opening)."""
        key = (member.pid, member.start_time)
        fd = self._pidfds.get(key)
        if fd is not None:
            return fd
        try:
            fd = os.pidfd_open(member.pid)
        except OSError:
            return None
        # The pidfd refers to whatever has this PID *now*; if its start time matches, the
        # fd is bound to our process and PID reuse can no longer fool us.
        if self._process(member.pid, member.start_time) is None:
            os.close(fd)
            return None
        self._pidfds[key] = fd
        return fd

    def _forget(self, member: Member) -> None:
        fd = self._pidfds.pop((member.pid, member.start_time), None)
        if fd is not None:
            os.close(fd)

    def alive(self, members: Iterable[Member]) -> list[Member]:
        out = []
        for m in members:
            fd = self._pidfd(m)
            if fd is None:
                self._forget(m)
                continue
            ready = select.poll()
            ready.register(fd, select.POLLIN)
            if ready.poll(0) or self._process(m.pid, m.start_time) is None:
                self._forget(m)  # exited (or zombie)
                continue
            out.append(m)
        return out

    def wait_exit(self, timeout: float) -> None:
        """Block until one tracked process exits or `timeout` passes (poll on pidfds)."""
        if not self._pidfds:
            time.sleep(timeout)
            return
        poller = select.poll()
        for fd in self._pidfds.values():
            poller.register(fd, select.POLLIN)
        poller.poll(max(0, int(timeout * 1000)))

    def current_tree(self, target: Target, members: Iterable[Member]) -> list[Member]:
        """Recorded members still alive plus the root's current descendants, deepest first."""
        seen = {(m.pid, m.start_time): m for m in members}
        root = self._process(target.pid, target.start_time)
        if root is not None:
            try:
                for child in root.children(recursive=True):
                    try:
                        m = Member(child.pid, child.create_time(), child.uids().real)
                    except psutil.Error:
                        continue
                    seen.setdefault((m.pid, m.start_time), m)
            except psutil.Error:
                pass
        ordered = [m for m in seen.values() if m.pid != target.pid]
        ordered.reverse()  # deepest descendants were listed last
        roots = [m for m in seen.values() if m.pid == target.pid]
        return ordered + roots

    def signal_tree(
        self, target: Target, members: Iterable[Member], sig: signal.Signals, *, dry_run: bool
    ) -> list[SignalResult]:
        """Signal every member (children first, root last), each verified before sending."""
        results = []
        for m in self.current_tree(target, members):
            proc = self._process(m.pid, m.start_time)
            if proc is None:
                results.append(SignalResult(m.pid, sig.name, False, "gone or identity changed"))
                continue
            why = self.protection_reason(proc)
            if why is not None:
                results.append(SignalResult(m.pid, sig.name, False, f"protected: {why}"))
                continue
            results.append(send_signal(self, m, sig, dry_run=dry_run))
        return results


def send_signal(
    node: LocalNode, member: Member, sig: signal.Signals, *, dry_run: bool
) -> SignalResult:
    """The one function that signals a process: through a verified pidfd, or a dry run."""
    if dry_run:
        log.info("DRY-RUN: would send %s to pid %d", sig.name, member.pid)
        return SignalResult(member.pid, sig.name, False, "dry run")
    fd = node._pidfd(member)
    if fd is None:
        return SignalResult(member.pid, sig.name, False, "gone or identity changed")
    try:
        signal.pidfd_send_signal(fd, sig)
    except ProcessLookupError:
        return SignalResult(member.pid, sig.name, False, "already exited")
    except OSError as exc:
        return SignalResult(member.pid, sig.name, False, f"error: {exc.strerror or exc}")
    log.warning("sent %s to pid %d", sig.name, member.pid)
    return SignalResult(member.pid, sig.name, True)


def _group_names(user: str, gid: int) -> list[str]:
    import grp

    names = []
    for g in os.getgrouplist(user, gid):
        try:
            names.append(grp.getgrgid(g).gr_name)
        except KeyError:
            continue
    return names


def _log_mtime(members: Iterable[Member]) -> float | None:
    """Latest mtime of the regular files behind the members' stdout/stderr."""
    latest: float | None = None
    for m in members:
        for fd in (1, 2):
            try:
                st = os.stat(f"/proc/{m.pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_mode & 0o170000) == 0o100000:  # S_ISREG
                latest = st.st_mtime if latest is None else max(latest, st.st_mtime)
    return latest
