"""The one place a process's GPU state is checkpointed and restored: the CUDA driver's
`cuCheckpointProcess*` calls (driver 570+, CUDA 12.8) on a real node, the simulated
driver (exporter/sim/checkpoint.py) on a simulated one.

A suspend is lock then checkpoint: a lock that times out (a kernel that never ends) or a
checkpoint the driver refuses (an NCCL rank, host memory short) leaves the process running
(unlocked), and the case goes on up the ladder. A resume is restore then unlock: a restore
the driver refuses (no room on the GPU) leaves the process checkpointed, never half
restored; a restore onto another GPU of the same chip remaps the process's GPU (the
driver's GPU UUID pairs, CUDA 13.1+). Nothing here SIGSTOPs anything. What the node proves
afterwards (the state, the PID gone from NVML's list, the GPU's memory down) is judged by
actuator/suspension.py.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

# CUprocessState, by name (the simulated driver uses the same names).
STATES = {0: "running", 1: "locked", 2: "checkpointed", 3: "failed"}


@dataclass(frozen=True)
class CheckpointResult:
    ok: bool
    state: str  # the driver's state of the process after the call ("" unknown)
    detail: str
    no_room: bool = False  # a resume not tried: no GPU had room (the driver was not called)
    onto: str = ""  # a restore onto another GPU: its UUID


@dataclass(frozen=True)
class Remap:
    """A restore onto another GPU than the one the process was checkpointed on."""

    old_uuid: str
    new_uuid: str
    new_index: int


class Checkpointer(Protocol):
    def state(self, pid: int) -> str:
        """The driver's state of the process ("" where it cannot tell)."""
        ...

    def suspend(self, pid: int, lock_timeout: float) -> CheckpointResult: ...

    def resume(self, pid: int, remap: Remap | None = None) -> CheckpointResult: ...

    def host_room(self) -> int | None:
        """Host memory the driver has for checkpoints (None: only the kernel knows)."""
        ...


class CudaError(Exception):
    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: CUresult {code}")
        self.code = code


class _LockArgs(ctypes.Structure):  # CUcheckpointLockArgs
    _fields_ = [
        ("timeoutMs", ctypes.c_uint),
        ("reserved0", ctypes.c_uint),
        ("reserved1", ctypes.c_uint64 * 7),
    ]


class _Uuid(ctypes.Structure):  # CUuuid
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


class _GpuPair(ctypes.Structure):  # CUcheckpointGpuPair
    _fields_ = [("oldUuid", _Uuid), ("newUuid", _Uuid)]


class _RestoreArgs(ctypes.Structure):
    """CUcheckpointRestoreArgs as CUDA 13.1+ lays it out: the pairs, their count, zeros to
    64 bytes (CUDA 12.8/12.9 have 64 reserved bytes there: no remap)."""

    _fields_ = [
        ("gpuPairs", ctypes.POINTER(_GpuPair)),
        ("gpuPairsCount", ctypes.c_uint),
        ("reserved", ctypes.c_ubyte * 52),
    ]


REMAP_DRIVER = 13010  # cuDriverGetVersion's CUDA 13.1: the first with GPU UUID pairs


def cu_uuid(nvml_uuid: str) -> _Uuid:
    """NVML's "GPU-8a7c...-..." as the driver's 16 bytes (ValueError: not a GPU UUID)."""
    hexed = nvml_uuid.removeprefix("GPU-").replace("-", "")
    try:
        raw = bytes.fromhex(hexed)
    except ValueError:
        raw = b""
    if not nvml_uuid.startswith("GPU-") or len(raw) != 16:
        raise ValueError(f"not a GPU UUID: {nvml_uuid!r}")
    out = _Uuid()
    out.bytes[:] = list(raw)
    return out


def restore_args(remap: Remap) -> tuple[_RestoreArgs, _GpuPair]:
    """The restore's arguments for one GPU pair (the pair returned too: it must outlive the
    call, the arguments point at it)."""
    pair = _GpuPair(cu_uuid(remap.old_uuid), cu_uuid(remap.new_uuid))
    args = _RestoreArgs(gpuPairs=ctypes.pointer(pair), gpuPairsCount=1)
    return args, pair


def _check(result: int, what: str) -> None:
    if result != 0:
        raise CudaError(what, result)


class CudaCheckpointer:
    """The driver API through libcuda (ctypes: no CUDA toolkit needed on the node)."""

    CALLS = ("Lock", "Checkpoint", "Restore", "Unlock", "GetState")

    def __init__(self, library: str = "libcuda.so.1") -> None:
        self.cuda: Any = ctypes.CDLL(library)
        _check(self.cuda.cuInit(0), "cuInit")
        for name in self.CALLS:
            if not hasattr(self.cuda, f"cuCheckpointProcess{name}"):
                raise RuntimeError(
                    f"this driver has no cuCheckpointProcess{name}: driver 570+ (CUDA 12.8) needed"
                )

    def state(self, pid: int) -> str:
        found = ctypes.c_int()
        try:
            _check(self.cuda.cuCheckpointProcessGetState(pid, ctypes.byref(found)), "GetState")
        except CudaError:
            return ""
        return STATES.get(found.value, "")

    def lock(self, pid: int, timeout_s: float) -> None:
        args = _LockArgs(timeoutMs=int(timeout_s * 1000))
        _check(self.cuda.cuCheckpointProcessLock(pid, ctypes.byref(args)), "Lock")

    def checkpoint(self, pid: int) -> None:
        _check(self.cuda.cuCheckpointProcessCheckpoint(pid, None), "Checkpoint")

    def restore(self, pid: int, remap: Remap | None = None) -> None:
        if remap is None:
            _check(self.cuda.cuCheckpointProcessRestore(pid, None), "Restore")
            return
        args, _pair = restore_args(remap)
        _check(self.cuda.cuCheckpointProcessRestore(pid, ctypes.byref(args)), "Restore")

    def driver_version(self) -> int:
        found = ctypes.c_int()
        _check(self.cuda.cuDriverGetVersion(ctypes.byref(found)), "cuDriverGetVersion")
        return found.value

    def unlock(self, pid: int) -> None:
        _check(self.cuda.cuCheckpointProcessUnlock(pid, None), "Unlock")

    def suspend(self, pid: int, lock_timeout: float) -> CheckpointResult:
        try:
            self.lock(pid, lock_timeout)
        except CudaError as exc:
            return CheckpointResult(False, self.state(pid), f"lock: {exc}")
        try:
            self.checkpoint(pid)
        except CudaError as exc:
            self._unlock_quietly(pid)
            return CheckpointResult(False, self.state(pid), f"checkpoint: {exc}")
        return CheckpointResult(True, self.state(pid), "checkpointed")

    def resume(self, pid: int, remap: Remap | None = None) -> CheckpointResult:
        if remap is not None:
            try:
                version = self.driver_version()
            except CudaError as exc:
                return CheckpointResult(False, self.state(pid), f"restore: {exc}")
            if version < REMAP_DRIVER:  # its arguments' bytes mean nothing to it yet
                return CheckpointResult(
                    False,
                    self.state(pid),
                    f"restore onto GPU {remap.new_index}: this driver (CUDA "
                    f"{version // 1000}.{version % 1000 // 10}) restores only onto the GPU "
                    "it was checkpointed on (13.1+ remaps)",
                    no_room=True,
                )
        try:
            self.restore(pid, remap)
            self.unlock(pid)
        except (CudaError, ValueError) as exc:  # ValueError: a UUID the driver cannot take
            return CheckpointResult(False, self.state(pid), f"restore: {exc}")
        return CheckpointResult(True, self.state(pid), "restored")

    def host_room(self) -> int | None:
        return None

    def _unlock_quietly(self, pid: int) -> None:
        try:
            self.unlock(pid)
        except CudaError as exc:
            log.error("pid %d: unlock after a failed checkpoint: %s", pid, exc)


class SimCheckpointer:
    """The simulated driver of a simulated node directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def state(self, pid: int) -> str:
        from exporter.sim import checkpoint as sim

        try:
            return str(sim.get_state(self.directory, pid))
        except sim.CheckpointError:
            return ""

    def suspend(self, pid: int, lock_timeout: float) -> CheckpointResult:
        from exporter.sim import checkpoint as sim

        try:
            sim.lock(self.directory, pid, lock_timeout)
        except sim.CheckpointError as exc:
            return CheckpointResult(False, self.state(pid), f"lock: {exc}")
        try:
            sim.checkpoint(self.directory, pid)
        except sim.CheckpointError as exc:
            try:
                sim.unlock(self.directory, pid)
            except sim.CheckpointError as again:
                log.error("pid %d: unlock after a failed checkpoint: %s", pid, again)
            return CheckpointResult(False, self.state(pid), f"checkpoint: {exc}")
        return CheckpointResult(True, self.state(pid), "checkpointed")

    def resume(self, pid: int, remap: Remap | None = None) -> CheckpointResult:
        from exporter.sim import checkpoint as sim

        try:
            sim.restore(self.directory, pid, None if remap is None else remap.new_index)
            sim.unlock(self.directory, pid)
        except sim.CheckpointError as exc:
            return CheckpointResult(False, self.state(pid), f"restore: {exc}")
        return CheckpointResult(True, self.state(pid), "restored")

    def host_room(self) -> int | None:
        from exporter.sim import checkpoint as sim
        from exporter.sim.state import load_node

        try:
            node = load_node(self.directory)
        except (OSError, ValueError):  # no simulated node there (yet): unknown, not room
            return None
        return node.host_memory - sim.host_memory_used(self.directory)


def checkpointer_for(sim_dir: str | Path | None) -> Checkpointer | None:
    """The node's checkpointer: the simulated driver, or the real one where the driver has
    the calls (None: this node cannot suspend, and the rung is skipped)."""
    if sim_dir is not None:
        return SimCheckpointer(Path(sim_dir))
    try:
        return CudaCheckpointer()
    except (OSError, RuntimeError, CudaError) as exc:
        log.info("no CUDA checkpoint on this node (the suspend rung is skipped): %s", exc)
        return None
