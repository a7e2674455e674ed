"""`gpu-reclaimer sim ...`: create simulated nodes, run workloads on them, inject faults."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from exporter import argtypes
from exporter.argtypes import CommandError
from exporter.sim.nvml import SimulatedNvml
from exporter.sim.state import (
    PROCS_DIR,
    Faults,
    SimNode,
    init_node,
    load_faults,
    load_node,
    read_procs,
    save_faults,
    save_node,
    write_text_atomic,
)
from exporter.units import format_duration, format_size, parse_size

_LAUNCHER = """\
#!{python}
# A simulated GPU workload launched under the name {name!r} (gpu-reclaimer sim run).
import sys
from exporter.sim.workload import main
sys.exit(main(sys.argv[1:]))
"""


def add_commands(commands: Any) -> None:
    sim = commands.add_parser(
        "sim",
        help="simulated GPU nodes and workloads (no GPU needed)",
        description="Create a simulated GPU node, run real processes that 'use' its GPUs, "
        "and inject NVML faults. Point the exporter at it with --sim-dir DIR or "
        "GPU_RECLAIMER_SIM_DIR=DIR.",
    )
    sub = sim.add_subparsers(dest="sim_command", metavar="SUBCOMMAND", required=True)

    init = sub.add_parser("init", help="create a simulated node", description="Create DIR.")
    init.add_argument("dir", type=Path, help="node directory to create")
    init.add_argument(
        "--gpus", type=argtypes.positive_int, default=2, help="number of GPUs (default: 2)"
    )
    init.add_argument("--memory", type=argtypes.size, default=80 * 1024**3, help="memory per GPU")
    init.add_argument("--name", default="NVIDIA H100 80GB HBM3", help="GPU product name")
    init.add_argument(
        "--leak", action="store_true", help="memory of exited processes stays used (orphaned)"
    )
    init.set_defaults(func=_init, command_prog=init.prog)

    from exporter.sim.workload import add_workload_arguments

    run = sub.add_parser(
        "run",
        help="run a real process that uses a simulated GPU",
        description="Run a real process that holds memory on a simulated GPU and follows a "
        "phase program: load (memory grows, util 0), busy (util high, logs and heartbeats), "
        "idle (util 0, nothing written), hang (util 100 %, nothing written). "
        "It frees its memory when it exits.",
    )
    add_workload_arguments(run)
    looks = run.add_mutually_exclusive_group()
    looks.add_argument(
        "--name", help="run as a command of this name (e.g. tensorboard, yolo, jupyter-lab)"
    )
    looks.add_argument("--module", help="run as 'python -m MODULE' (e.g. ipykernel_launcher)")
    run.set_defaults(func=_run, command_prog=run.prog)

    fault = sub.add_parser(
        "fault",
        help="inject or clear NVML faults on a node",
        description="Change the faults of a simulated node; effective within a second.",
    )
    fault.add_argument("dir", type=Path, help="the simulated node's directory (sim init)")
    fault.add_argument("--clear", action="store_true", help="clear every fault first")
    fault.add_argument("--nvml-missing", choices=["on", "off"], help="NVML library/driver gone")
    fault.add_argument(
        "--lose-gpu",
        type=int,
        action="append",
        default=[],
        metavar="I",
        help="GPU I falls off the bus: NVML answers GPU_IS_LOST for it (repeatable)",
    )
    fault.add_argument(
        "--restore-gpu",
        type=int,
        action="append",
        default=[],
        metavar="I",
        help="GPU I answers again (repeatable)",
    )
    fault.add_argument(
        "--no-process-util",
        type=int,
        action="append",
        default=[],
        metavar="I",
        help="per-process utilisation NOT_SUPPORTED on GPU I (as on MIG)",
    )
    fault.add_argument(
        "--hang",
        metavar="CALL",
        help="this NVML call blocks (one the simulation answers, e.g. "
        "nvmlDeviceGetComputeRunningProcesses); '' to stop",
    )
    fault.add_argument("--hang-seconds", type=float, help="how long the call blocks")
    fault.add_argument(
        "--ghost",
        action="append",
        default=[],
        metavar="GPU:PID:SIZE",
        type=_ghost,
        help="NVML lists a PID that /proc does not have",
    )
    fault.add_argument(
        "--util-pid-offset",
        action="append",
        default=[],
        metavar="GPU:OFFSET",
        type=_offset,
        help="utilisation samples of GPU name PID+OFFSET (another PID namespace)",
    )
    fault.add_argument("--leak", choices=["on", "off"], help="leak memory of exited processes")
    fault.add_argument(
        "--checkpoint-lock-hang",
        choices=["on", "off"],
        help="the driver's checkpoint lock never returns in time (a kernel that never ends)",
    )
    fault.add_argument(
        "--checkpoint-restore-fails",
        choices=["on", "off"],
        help="the driver refuses every restore, room or not (the process stays checkpointed)",
    )
    fault.set_defaults(func=_fault, command_prog=fault.prog)

    suspend = sub.add_parser(
        "suspend",
        help="checkpoint a process's GPU state into host memory (the CUDA driver's checkpoint)",
        description="As cuCheckpointProcessLock then cuCheckpointProcessCheckpoint: the "
        "process stops, its GPU memory is copied into its host memory and the GPU released "
        "(exporter/sim/checkpoint.py). Refused for an NCCL rank or where host memory is short.",
    )
    suspend.add_argument("dir", type=Path, help="the simulated node's directory (sim init)")
    suspend.add_argument("pid", type=argtypes.positive_int, help="the process to suspend")
    suspend.add_argument(
        "--lock-timeout",
        type=argtypes.duration,
        default=10.0,
        help="how long the lock waits for the process to stop (default 10s)",
    )
    suspend.set_defaults(func=_suspend, command_prog=suspend.prog)
    resume = sub.add_parser(
        "resume",
        help="restore a suspended process onto a GPU and let it run",
        description="As cuCheckpointProcessRestore then cuCheckpointProcessUnlock: onto its "
        "own GPU, or --gpu I of the same chip; refused (still suspended) without room.",
    )
    resume.add_argument("dir", type=Path, help="the simulated node's directory (sim init)")
    resume.add_argument("pid", type=argtypes.positive_int, help="the suspended process")
    resume.add_argument("--gpu", type=int, metavar="I", help="restore onto GPU I")
    resume.set_defaults(func=_resume, command_prog=resume.prog)

    status = sub.add_parser("status", help="show a node's GPUs, processes and faults")
    status.add_argument("dir", type=Path, help="the simulated node's directory (sim init)")
    status.set_defaults(func=_status, command_prog=status.prog)

    replay = sub.add_parser(
        "replay-requests",
        help="send requests to a serving workload at a recorded trace's arrival times",
        description="Send one POST per row of TRACE.csv (the Azure LLM inference trace's "
        "format: TIMESTAMP,ContextTokens,GeneratedTokens) to a serving workload "
        "('sim run --serve PORT'), at the rows' arrival times divided by --speed, over a few "
        "keep-alive connections: the whole stack sees real sockets and real bursts.",
    )
    replay.add_argument("trace", type=Path, help="the trace (CSV)")
    replay.add_argument(
        "--url", required=True, help="the serving workload, e.g. http://127.0.0.1:8000"
    )
    replay.add_argument(
        "--speed", type=float, default=1.0, help="replay N times faster (default 1: real time)"
    )
    replay.add_argument("--limit", type=int, help="only the first N requests")
    replay.add_argument(
        "--connections", type=int, default=4, help="keep-alive connections (default 4)"
    )
    replay.set_defaults(func=_replay, command_prog=replay.prog)


def _replay(args: argparse.Namespace) -> int:
    from exporter.sim.replay import TraceError, progress_printer, read_trace, replay

    if args.speed <= 0:
        raise CommandError("--speed must be above 0")
    if args.limit is not None and args.limit < 1:
        raise CommandError("--limit must be 1 or more")
    try:
        arrivals = read_trace(args.trace, args.limit)
    except OSError as error:
        raise CommandError(f"cannot read the trace {args.trace}: {error.strerror}") from None
    except TraceError as error:
        raise CommandError(str(error)) from None
    try:
        span = arrivals[-1].offset / args.speed
        print(f"{len(arrivals)} requests over {span:.0f}s", file=sys.stderr, flush=True)
        tally = replay(
            arrivals,
            args.url.rstrip("/") + "/v1/completions",
            speed=args.speed,
            connections=args.connections,
            progress=progress_printer(),
        )
    except (TraceError, OSError) as error:
        raise CommandError(str(error)) from None
    print(f"sent {tally.sent} requests ({tally.bytes_sent} bytes), {tally.failed} failed")
    return 1 if tally.failed else 0


def _ghost(text: str) -> tuple[int, int, int]:
    try:
        gpu, pid, size = text.split(":")
        return int(gpu), int(pid), parse_size(size)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: use GPU:PID:SIZE, e.g. 0:4000000:1GiB"
        ) from None


def _offset(text: str) -> tuple[int, int]:
    try:
        gpu, offset = text.split(":")
        return int(gpu), int(offset)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use GPU:OFFSET, e.g. 0:100000") from None


def _load(directory: Path) -> SimNode:
    try:
        return load_node(directory)
    except (FileNotFoundError, ValueError) as error:
        raise CommandError(str(error)) from None


def _check_gpus(node: SimNode, what: str, indices: Iterable[int]) -> None:
    for index in indices:
        if index not in range(len(node.gpus)):
            raise CommandError(f"{what} {index}: the node has GPUs 0..{len(node.gpus) - 1}")


def _init(args: argparse.Namespace) -> int:
    try:
        node = init_node(args.dir, args.gpus, args.memory, args.name, leak_on_exit=args.leak)
    except (OSError, ValueError) as error:
        raise CommandError(str(error)) from None
    print(
        f"simulated node {args.dir}: {len(node.gpus)} x {args.name}, "
        f"{format_size(args.memory)} each"
    )
    print(f"use it with: gpu-reclaimer exporter --sim-dir {args.dir}")
    return 0


def _write_launcher(directory: Path, name: str) -> Path:
    """The launcher, written whole and renamed into place: workloads started together each
    write it while another may be exec'ing it, and an exec'd file cannot be rewritten."""
    path = directory / name
    write_text_atomic(path, _LAUNCHER.format(python=sys.executable, name=name), mode=0o755)
    return path


def _write_module(root: Path, module: str) -> None:
    """`python -m a.b.c` finds the workload as module a.b.c under `root` (packages made)."""
    *packages, name = module.split(".")
    if not all(part.isidentifier() for part in [*packages, name]):
        raise CommandError(f"--module {module!r}: not a Python module name")
    directory = root.joinpath(*packages)
    for depth in range(1, len(packages) + 1):
        init = root.joinpath(*packages[:depth]) / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        init.touch()
    _write_launcher(directory, f"{name}.py")


def _check_user(user: str) -> None:
    import pwd

    if os.geteuid() != 0:
        raise CommandError("--user needs root (it switches to that account once started)")
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise CommandError(f"--user {user}: no such account") from None


def _run(args: argparse.Namespace) -> int:
    from exporter.sim.workload import run_workload, spec_from_args, workload_argv

    try:
        spec = spec_from_args(args)
    except ValueError as error:
        raise CommandError(str(error)) from None
    if args.user:
        _check_user(args.user)
    node = _load(args.dir)
    _check_gpus(node, "--gpu", [args.gpu])
    total = node.gpus[args.gpu].memory_total
    wanted = spec.memory + spec.children * spec.child_memory
    if wanted > total:
        workers = (
            f" + {spec.children} x --child-memory {format_size(spec.child_memory)}"
            if spec.children
            else ""
        )
        raise CommandError(
            f"--memory {format_size(spec.memory)}{workers} does not fit GPU {args.gpu} "
            f"({format_size(total)})"
        )
    if args.name:
        # A real executable of that name, so argv, /proc/PID/comm and psutil all agree.
        launcher = _write_launcher(args.dir / "bin", Path(args.name).name)
        os.execv(launcher, [str(launcher), *workload_argv(args)])
    if args.module:
        root = args.dir / "pymod"
        _write_module(root, args.module)
        path = [str(root), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
        os.execve(sys.executable, [sys.executable, "-m", args.module, *workload_argv(args)], env)
    return run_workload(spec)


def _fault(args: argparse.Namespace) -> int:
    node = _load(args.dir)
    _check_gpus(node, "--lose-gpu", args.lose_gpu)
    _check_gpus(node, "--restore-gpu", args.restore_gpu)
    _check_gpus(node, "--no-process-util", args.no_process_util)
    _check_gpus(node, "--ghost", [gpu for gpu, _, _ in args.ghost])
    _check_gpus(node, "--util-pid-offset", [gpu for gpu, _ in args.util_pid_offset])
    if args.hang and args.hang not in NVML_CALLS:
        raise CommandError(
            f"--hang {args.hang!r}: not an NVML call the simulation answers; one of "
            + ", ".join(sorted(NVML_CALLS))
        )
    if args.hang_seconds is not None and not args.hang_seconds > 0:
        raise CommandError("--hang-seconds must be above 0")
    faults = Faults() if args.clear else load_faults(args.dir)
    lost = (set(faults.lost_gpus) | set(args.lose_gpu)) - set(args.restore_gpu)
    changes: dict[str, Any] = {"lost_gpus": tuple(sorted(lost))}
    if args.nvml_missing:
        changes["nvml_missing"] = args.nvml_missing == "on"
    if args.no_process_util:
        changes["process_util_unsupported"] = tuple(
            sorted(set(faults.process_util_unsupported) | set(args.no_process_util))
        )
    if args.hang is not None:
        changes["hang_call"] = args.hang
    if args.checkpoint_lock_hang:
        changes["checkpoint_lock_hang"] = args.checkpoint_lock_hang == "on"
    if args.checkpoint_restore_fails:
        changes["checkpoint_restore_fails"] = args.checkpoint_restore_fails == "on"
    if args.hang_seconds is not None:
        changes["hang_seconds"] = args.hang_seconds
    if args.ghost:
        ghosts = list(faults.ghost_pids)
        ghosts.extend(args.ghost)
        changes["ghost_pids"] = tuple(ghosts)
    if args.util_pid_offset:
        changes["util_pid_offsets"] = tuple(
            (dict(faults.util_pid_offsets) | dict(args.util_pid_offset)).items()
        )
    save_faults(args.dir, dataclasses.replace(faults, **changes))
    if args.leak:
        save_node(args.dir, dataclasses.replace(node, leak_on_exit=args.leak == "on"))
    print(describe_faults(load_faults(args.dir)))
    return 0


# The NVML calls the simulation answers, so the only ones a hang can be injected into.
NVML_CALLS = frozenset(name for name in dir(SimulatedNvml) if name.startswith("nvml"))


def describe_faults(faults: Faults) -> str:
    """The node's faults in words (one line), "faults: none" on a healthy node."""
    said = []
    if faults.nvml_missing:
        said.append("NVML missing (library or driver gone)")
    said += [f"GPU {i} lost" for i in faults.lost_gpus]
    said += [
        f"per-process utilisation unsupported on GPU {i}" for i in faults.process_util_unsupported
    ]
    if faults.hang_call:
        said.append(f"{faults.hang_call} blocks for {format_duration(faults.hang_seconds)}")
    said += [
        f"NVML lists PID {pid} on GPU {gpu} holding {format_size(size)}, unknown to /proc"
        for gpu, pid, size in faults.ghost_pids
    ]
    said += [
        f"GPU {gpu}'s utilisation samples name PID+{offset}"
        for gpu, offset in faults.util_pid_offsets
    ]
    if faults.checkpoint_lock_hang:
        said.append("the checkpoint lock never returns in time")
    if faults.checkpoint_restore_fails:
        said.append("the driver refuses every restore")
    return "faults: " + ("; ".join(said) if said else "none")


def _suspend(args: argparse.Namespace) -> int:
    from exporter.sim.checkpoint import CheckpointError, checkpoint, lock, unlock

    _load(args.dir)
    try:
        lock(args.dir, args.pid, timeout_s=args.lock_timeout)
        try:
            done = checkpoint(args.dir, args.pid)
        except CheckpointError:
            unlock(args.dir, args.pid)  # refused: it runs on, as before
            raise
    except CheckpointError as exc:
        raise CommandError(f"cannot suspend process {args.pid}: {exc}") from None
    print(
        f"process {args.pid} suspended: {format_size(done.footprint)} copied from GPU "
        f"{done.gpu} into host memory; the GPU is released"
    )
    return 0


def _resume(args: argparse.Namespace) -> int:
    from exporter.sim.checkpoint import CheckpointError, restore, unlock

    node = _load(args.dir)
    if args.gpu is not None:
        _check_gpus(node, "--gpu", [args.gpu])
    try:
        done = restore(args.dir, args.pid, args.gpu)
        unlock(args.dir, args.pid)
    except CheckpointError as exc:
        raise CommandError(f"cannot resume process {args.pid}: {exc}") from None
    print(f"process {args.pid} resumed on GPU {done.gpu} ({format_size(done.footprint)})")
    return 0


def _status(args: argparse.Namespace) -> int:
    node = _load(args.dir)
    from exporter.procfs import start_ticks

    print(f"node {args.dir} (driver {node.driver_version}, leak_on_exit={node.leak_on_exit})")
    procs = read_procs(args.dir)
    for gpu in node.gpus:
        print(f"GPU {gpu.index} {gpu.uuid} {gpu.name} {format_size(gpu.memory_total)}")
        for p in sorted(procs, key=lambda p: p.pid):
            if p.gpu != gpu.index:
                continue
            alive = start_ticks(p.pid) == p.start_ticks
            print(
                f"  pid {p.pid:>7} {format_size(p.memory_used):>10} util {p.sm_util:>3}% "
                f"{p.extra.get('phase', '?'):<6} {'alive' if alive else 'exited'}"
            )
    from exporter.sim.checkpoint import suspended

    for record in suspended(args.dir):
        print(
            f"suspended: pid {record.pid} (GPU {record.gpu}, {format_size(record.footprint)} "
            "in host memory)"
        )
    print(describe_faults(load_faults(args.dir)))
    print(f"process files: {args.dir / PROCS_DIR}")
    return 0
