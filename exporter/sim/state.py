"""The on-disk state of a simulated GPU node.

Layout of a node directory::

    node.json         GPUs (index, uuid, name, memory), driver version, leak mode
    faults.json       injected faults (optional; see Faults)
    procs/<pid>.json  one file per workload process: GPU, memory held, SM utilisation

Workloads write their own file atomically; the simulated NVML only reads. A file whose
process is gone (PID missing or start time different) is freed memory, or leaked memory
when the node is in leak mode.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid as uuid_module
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

NODE_FILE = "node.json"
FAULTS_FILE = "faults.json"
PROCS_DIR = "procs"
DEFAULT_RESERVED_BYTES = 512 * 1024**2  # what a real driver keeps on an idle card
DEFAULT_HOST_MEMORY = 512 * 1024**3  # the host's memory checkpoints are copied into
DEFAULT_COPY_RATE = 20 * 1024**3  # bytes a second between GPU and host (PCIe Gen5 x16-ish)


@dataclass(frozen=True)
class SimGpu:
    index: int
    uuid: str
    name: str
    memory_total: int
    reserved: int = DEFAULT_RESERVED_BYTES


@dataclass(frozen=True)
class SimNode:
    gpus: tuple[SimGpu, ...]
    driver_version: str = "550.127.05"
    leak_on_exit: bool = False
    host_memory: int = DEFAULT_HOST_MEMORY  # what checkpoints may take (sim/checkpoint.py)
    copy_bytes_per_second: int = DEFAULT_COPY_RATE  # a checkpoint's and a restore's copy


@dataclass(frozen=True)
class Faults:
    """Injected failures. Every field off means a healthy node."""

    nvml_missing: bool = False  # nvmlInit fails: library not found / driver not loaded
    lost_gpus: tuple[int, ...] = ()  # these GPUs answer NVMLError_GpuIsLost
    process_util_unsupported: tuple[int, ...] = ()  # NOT_SUPPORTED per-process util (MIG)
    hang_call: str = ""  # this NVML function blocks for hang_seconds
    hang_seconds: float = 3600.0
    ghost_pids: tuple[tuple[int, int, int], ...] = ()  # (gpu, pid, bytes) listed, not in /proc
    # (gpu, offset): utilisation samples name PID + offset, as when a container or vGPU layer
    # reports PIDs of another namespace than the process list
    util_pid_offsets: tuple[tuple[int, int], ...] = ()
    # cuCheckpointProcessLock never returns in time: the process's kernel never finishes
    checkpoint_lock_hang: bool = False
    # cuCheckpointProcessRestore refuses every restore, room or not (a UVM allocation, a
    # driver fault): the process stays checkpointed
    checkpoint_restore_fails: bool = False


@dataclass
class ProcState:
    """What one workload process holds on its GPU, as it last reported."""

    pid: int
    start_ticks: int
    gpu: int
    memory_used: int
    sm_util: int
    updated: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write via a temporary file and rename, so readers never see half a file. Readable
    by all, like the driver state it stands in for (workloads may run as other users)."""
    write_text_atomic(path, json.dumps(payload), mode=0o644, suffix=".json")


def write_text_atomic(path: Path, text: str, *, mode: int, suffix: str = "") -> None:
    """Write `text` to a new file and rename it over `path`: a reader (or a process exec'ing
    the old file, which the kernel keeps from being written: ETXTBSY) keeps the old inode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=suffix)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def init_node(
    directory: Path, gpus: int, memory_total: int, name: str, leak_on_exit: bool = False
) -> SimNode:
    if gpus < 1:
        raise ValueError("a simulated node needs at least one GPU")
    node = SimNode(
        gpus=tuple(
            SimGpu(index=i, uuid=f"GPU-{uuid_module.uuid4()}", name=name, memory_total=memory_total)
            for i in range(gpus)
        ),
        leak_on_exit=leak_on_exit,
    )
    (directory / PROCS_DIR).mkdir(parents=True, exist_ok=True)
    save_node(directory, node)
    save_faults(directory, Faults())
    return node


def save_node(directory: Path, node: SimNode) -> None:
    write_json_atomic(directory / NODE_FILE, asdict(node))


def load_node(directory: Path) -> SimNode:
    path = directory / NODE_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} does not exist: create the node first with "
            f"'gpu-reclaimer sim init {directory}'"
        ) from None
    return SimNode(
        gpus=tuple(SimGpu(**gpu) for gpu in raw["gpus"]),
        driver_version=raw.get("driver_version", "550.127.05"),
        leak_on_exit=bool(raw.get("leak_on_exit", False)),
        host_memory=int(raw.get("host_memory", DEFAULT_HOST_MEMORY)),
        copy_bytes_per_second=int(raw.get("copy_bytes_per_second", DEFAULT_COPY_RATE)),
    )


def save_faults(directory: Path, faults: Faults) -> None:
    write_json_atomic(directory / FAULTS_FILE, asdict(faults))


def load_faults(directory: Path) -> Faults:
    try:
        raw = json.loads((directory / FAULTS_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return Faults()
    return Faults(
        nvml_missing=bool(raw.get("nvml_missing", False)),
        lost_gpus=tuple(raw.get("lost_gpus", ())),
        process_util_unsupported=tuple(raw.get("process_util_unsupported", ())),
        hang_call=str(raw.get("hang_call", "")),
        hang_seconds=float(raw.get("hang_seconds", 3600.0)),
        ghost_pids=tuple(tuple(g) for g in raw.get("ghost_pids", ())),
        util_pid_offsets=tuple(tuple(o) for o in raw.get("util_pid_offsets", ())),
        checkpoint_lock_hang=bool(raw.get("checkpoint_lock_hang", False)),
        checkpoint_restore_fails=bool(raw.get("checkpoint_restore_fails", False)),
    )


def proc_path(directory: Path, pid: int) -> Path:
    return directory / PROCS_DIR / f"{pid}.json"


def write_proc(directory: Path, state: ProcState) -> None:
    write_json_atomic(proc_path(directory, state.pid), asdict(state))


class ProcFileCache:
    """read_procs() that re-parses only files changed since the last call (by mtime, size).

    The simulated driver reads every process file per snapshot; most did not change.
    """

    def __init__(self, directory: Path) -> None:
        self.folder = str(directory / PROCS_DIR)
        self._parsed: dict[str, tuple[int, int, ProcState]] = {}

    def read(self) -> list[ProcState]:
        try:
            entries = list(os.scandir(self.folder))
        except FileNotFoundError:
            return []
        parsed: dict[str, tuple[int, int, ProcState]] = {}
        for entry in entries:
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            try:
                stat = entry.stat()
                cached = self._parsed.get(entry.name)
                if cached and cached[:2] == (stat.st_mtime_ns, stat.st_size):
                    parsed[entry.name] = cached
                    continue
                with open(entry.path, "rb") as handle:
                    state = ProcState(**json.loads(handle.read()))
            except (OSError, ValueError, TypeError):
                continue
            parsed[entry.name] = (stat.st_mtime_ns, stat.st_size, state)
        self._parsed = parsed
        return [state for _, _, state in parsed.values()]


def read_procs(directory: Path) -> list[ProcState]:
    """Every process file, skipping ones that vanish or are unreadable mid-read."""
    states = []
    folder = str(directory / PROCS_DIR)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            with open(f"{folder}/{name}", "rb") as handle:
                states.append(ProcState(**json.loads(handle.read())))
        except (OSError, ValueError, TypeError):
            continue
    return states
