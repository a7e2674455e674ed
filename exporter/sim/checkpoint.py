"""The CUDA driver's checkpoint of a simulated process: what `cuCheckpointProcessLock`,
`...Checkpoint`, `...Restore`, `...Unlock` and `...GetState` do to another process, over a
simulated node directory (the one stand-in for hardware).

As the driver does:

- `lock` stops the process's CUDA work: it waits (up to a timeout) until the process has
  finished what it was doing, and a process whose kernel never ends makes it time out;
- `checkpoint` (locked only) copies the process's GPU memory into its own host memory and
  releases the GPU: the process leaves the GPU's process list, the GPU's used memory drops by
  its footprint, and the process's host memory grows by it; the copy takes longer the larger
  the footprint; a process of a multi-process job (NCCL) is refused, and so is one whose
  footprint the host's memory cannot take;
- `restore` (checkpointed only) copies it back onto its GPU or another of the same chip,
  refused where that GPU has no room (the process stays checkpointed, never half restored);
- `unlock` (locked only) lets it run again.

A locked or checkpointed process makes no progress (the workload reads its state every
tick: no step, no log line, no heartbeat). State lives in `checkpoints/<pid>.json`, written
by whoever calls the driver; `checkpoints/<pid>.seen` is the process's own word of the
state it last acted on (how `lock` knows the process has stopped).
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path

from exporter.procfs import start_ticks
from exporter.sim.state import (
    ProcState,
    load_faults,
    load_node,
    proc_path,
    read_procs,
    write_json_atomic,
    write_proc,
)

CHECKPOINTS_DIR = "checkpoints"
DEFAULT_LOCK_TIMEOUT_S = 10.0


class ProcessState(StrEnum):
    """CUprocessState, by name."""

    RUNNING = "running"
    LOCKED = "locked"
    CHECKPOINTED = "checkpointed"
    FAILED = "failed"


class CheckpointError(Exception):
    """A refused or failed call, with the driver's error name (CUDA_ERROR_...)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code


@dataclass(frozen=True)
class Checkpoint:
    pid: int
    start_ticks: int
    state: ProcessState
    gpu: int  # where it runs, or ran before its checkpoint
    footprint: int = 0  # GPU memory it held when checkpointed (bytes)
    host_bytes: int = 0  # host memory its checkpoint takes (0 unless checkpointed)
    since: float = 0.0  # wall clock of the last change


def _path(directory: Path, pid: int, suffix: str = "json") -> Path:
    return directory / CHECKPOINTS_DIR / f"{pid}.{suffix}"


def _read(directory: Path, pid: int) -> Checkpoint | None:
    """The process's checkpoint record, if it is the same process (start ticks)."""
    try:
        raw = json.loads(_path(directory, pid).read_text())
        record = Checkpoint(**{**raw, "state": ProcessState(raw["state"])})
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return record if start_ticks(pid) == record.start_ticks else None


def _write(directory: Path, record: Checkpoint) -> None:
    write_json_atomic(_path(directory, record.pid), asdict(record) | {"state": str(record.state)})


def get_state(directory: Path, pid: int) -> ProcessState:
    """cuCheckpointProcessGetState: RUNNING for a process never locked."""
    if start_ticks(pid) is None:
        raise CheckpointError("CUDA_ERROR_INVALID_VALUE", f"no process {pid}")
    record = _read(directory, pid)
    return record.state if record is not None else ProcessState.RUNNING


def suspended(directory: Path) -> list[Checkpoint]:
    """The node's live processes that are checkpointed now."""
    folder = directory / CHECKPOINTS_DIR
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        record = _read(directory, int(path.stem)) if path.stem.isdigit() else None
        if record is not None and record.state == ProcessState.CHECKPOINTED:
            found.append(record)
    return found


def host_memory_used(directory: Path) -> int:
    """Host memory the node's live checkpoints take."""
    return sum(record.host_bytes for record in suspended(directory))


def lock(directory: Path, pid: int, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> None:
    """cuCheckpointProcessLock: returns once the process has stopped its CUDA work; after
    `timeout_s` it is left running and CUDA_ERROR_TIMEOUT is raised."""
    ticks = start_ticks(pid)
    if ticks is None:
        raise CheckpointError("CUDA_ERROR_INVALID_VALUE", f"no process {pid}")
    if get_state(directory, pid) != ProcessState.RUNNING:
        raise CheckpointError("CUDA_ERROR_ILLEGAL_STATE", f"process {pid} is not running")
    own = _own_proc(directory, pid)
    if own is None:
        raise CheckpointError("CUDA_ERROR_INVALID_VALUE", f"process {pid} holds no GPU")
    record = Checkpoint(pid, ticks, ProcessState.LOCKED, own.gpu, since=time.time())
    _write(directory, record)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if load_faults(directory).checkpoint_lock_hang:
            time.sleep(0.05)  # its kernel never finishes: the process cannot stop
            continue
        if seen(directory, pid) == ProcessState.LOCKED:
            return
        time.sleep(0.02)
    _write(directory, replace(record, state=ProcessState.RUNNING, since=time.time()))
    raise CheckpointError("CUDA_ERROR_TIMEOUT", f"process {pid} did not stop in {timeout_s:g}s")


def checkpoint(directory: Path, pid: int) -> Checkpoint:
    """cuCheckpointProcessCheckpoint: the GPU memory into host memory, the GPU released."""
    record = _locked(directory, pid, ProcessState.LOCKED)
    own = _own_proc(directory, pid)
    if own is None:
        raise CheckpointError("CUDA_ERROR_INVALID_VALUE", f"process {pid} holds no GPU")
    if own.extra.get("nccl"):
        raise CheckpointError("CUDA_ERROR_NOT_SUPPORTED", f"process {pid} is a rank of an NCCL job")
    node = load_node(directory)
    room = node.host_memory - host_memory_used(directory)
    if own.memory_used > room:
        raise CheckpointError(
            "CUDA_ERROR_OUT_OF_MEMORY",
            f"host memory: {own.memory_used} bytes to copy, {room} free",
        )
    time.sleep(own.memory_used / node.copy_bytes_per_second)
    proc_path(directory, pid).unlink(missing_ok=True)  # off the GPU: NVML lists it no more
    done = replace(
        record,
        state=ProcessState.CHECKPOINTED,
        footprint=own.memory_used,
        host_bytes=own.memory_used,
        since=time.time(),
    )
    _write(directory, done)
    return done


def restore(directory: Path, pid: int, gpu: int | None = None) -> Checkpoint:
    """cuCheckpointProcessRestore: back onto its GPU (or `gpu`, of the same chip), locked.
    Refused, still checkpointed, where that GPU has no room for it."""
    record = _locked(directory, pid, ProcessState.CHECKPOINTED)
    if load_faults(directory).checkpoint_restore_fails:
        raise CheckpointError("CUDA_ERROR_UNKNOWN", "the driver refused the restore (fault)")
    node = load_node(directory)
    target = record.gpu if gpu is None else gpu
    if not 0 <= target < len(node.gpus):
        raise CheckpointError("CUDA_ERROR_INVALID_DEVICE", f"no GPU {target}")
    if node.gpus[target].name != node.gpus[record.gpu].name:
        raise CheckpointError(
            "CUDA_ERROR_INVALID_DEVICE", f"GPU {target} is not the chip it was checkpointed on"
        )
    free = free_memory(directory, target)
    if record.footprint > free:
        raise CheckpointError(
            "CUDA_ERROR_OUT_OF_MEMORY",
            f"GPU {target}: {record.footprint} bytes to restore, {free} free",
        )
    time.sleep(record.footprint / node.copy_bytes_per_second)
    own = _saved_proc(record, target)
    write_proc(directory, own)
    done = replace(record, state=ProcessState.LOCKED, gpu=target, host_bytes=0, since=time.time())
    _write(directory, done)
    return done


def unlock(directory: Path, pid: int) -> None:
    """cuCheckpointProcessUnlock: it runs again."""
    record = _locked(directory, pid, ProcessState.LOCKED)
    _write(directory, replace(record, state=ProcessState.RUNNING, since=time.time()))


def free_memory(directory: Path, gpu: int) -> int:
    """What a GPU has free now, as NVML would say: its total less the driver's reserve and
    what its live processes hold."""
    node = load_node(directory)
    card = node.gpus[gpu]
    held = sum(
        p.memory_used
        for p in read_procs(directory)
        if p.gpu == gpu and start_ticks(p.pid) == p.start_ticks
    )
    return max(0, card.memory_total - card.reserved - held)


def placement(directory: Path, pid: int) -> tuple[ProcessState, int | None]:
    """For the process itself, every tick: its state and the GPU it is to report on (None:
    where it was started)."""
    record = _read(directory, pid)
    if record is None:
        return ProcessState.RUNNING, None
    return record.state, record.gpu


def acknowledge(directory: Path, pid: int, state: ProcessState) -> None:
    """The process's word that it acts on `state` now (it has stopped, or runs again)."""
    if seen(directory, pid) != state:
        # Unwritable: the lock never hears back and times out, and the process runs on.
        with contextlib.suppress(OSError):
            _path(directory, pid, "seen").write_text(str(state))


def seen(directory: Path, pid: int) -> ProcessState | None:
    try:
        return ProcessState(_path(directory, pid, "seen").read_text().strip())
    except (OSError, ValueError):
        return None


def _locked(directory: Path, pid: int, expected: ProcessState) -> Checkpoint:
    record = _read(directory, pid)
    state = record.state if record is not None else ProcessState.RUNNING
    if record is None or state != expected:
        raise CheckpointError(
            "CUDA_ERROR_ILLEGAL_STATE", f"process {pid} is {state}, not {expected}"
        )
    return record


def _own_proc(directory: Path, pid: int) -> ProcState | None:
    try:
        state = ProcState(**json.loads(proc_path(directory, pid).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return state if start_ticks(pid) == state.start_ticks else None


def _saved_proc(record: Checkpoint, gpu: int) -> ProcState:
    return ProcState(
        pid=record.pid,
        start_ticks=record.start_ticks,
        gpu=gpu,
        memory_used=record.footprint,
        sm_util=0,
        updated=time.time(),
        extra={"phase": "restored"},
    )
