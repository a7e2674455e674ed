"""A real OS process that "uses" a simulated GPU, following a phase program.

It reports what it holds by rewriting its file under ``<node>/procs/`` every tick; the
simulated NVML reads those files. psutil, /proc, pidfds and signals see a real process.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import random
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from exporter import argtypes
from exporter.argtypes import CommandError
from exporter.procfs import start_ticks
from exporter.sim.checkpoint import ProcessState, acknowledge, placement
from exporter.sim.phases import Phase, parse_phases, phase_at
from exporter.sim.state import ProcState, load_node, proc_path, write_proc

WORK_PHASES = frozenset({"load", "busy"})  # progress a suspended process does not make

LOG_INTERVAL_SECONDS = 1.0


@dataclass(frozen=True)
class WorkloadSpec:
    directory: Path
    gpu: int
    memory: int
    phases: tuple[Phase, ...]
    util: int = 95
    log: Path | None = None
    heartbeat: bool = False
    heartbeat_dir: Path | None = None
    ignore_sigterm: bool = False
    children: int = 0
    child_memory: int = 256 * 1024**2
    orphan_children: bool = False
    cpu: bool = False
    tick: float = 0.5
    user: str | None = None  # the account it runs as once started (root only)
    serve: int | None = None  # answer HTTP requests on this port (exporter/sim/serving.py)
    serve_address: str = "127.0.0.1"
    rank: bool = False  # hold a rank's collective sockets (exporter/sim/ranks.py)
    rank_store: int | None = None  # ...and a TCPStore-like listener on every interface here
    rank_peer: int | None = None  # ...and a silent connection to another rank's listener


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", required=True, type=Path, help="simulated node directory")
    parser.add_argument("--gpu", required=True, type=int, help="GPU index to use")
    parser.add_argument(
        "--memory", required=True, type=argtypes.size, help="memory held, e.g. 4GiB"
    )
    parser.add_argument(
        "--phases",
        required=True,
        help="comma list of load|busy|idle|hang[=DURATION|=cue]; the last lasts forever, or "
        "`done` ends the process (e.g. load=10s,busy=1m,idle or busy=1h,done); `=cue` lasts "
        "until the process gets SIGUSR1 (e.g. busy=5s,idle=cue,busy)",
    )
    parser.add_argument("--util", type=int, default=95, help="SM utilisation %% when busy")
    parser.add_argument("--log", type=Path, help="log file written while busy (default stdout)")
    parser.add_argument(
        "--heartbeat", action="store_true", help="refresh a heartbeat file while busy"
    )
    parser.add_argument("--heartbeat-dir", type=Path, help="heartbeat directory")
    parser.add_argument(
        "--ignore-sigterm", action="store_true", help="ignore SIGTERM (needs SIGKILL)"
    )
    parser.add_argument(
        "--children", type=int, default=0, help="worker processes that also hold memory"
    )
    parser.add_argument(
        "--child-memory", type=argtypes.size, default=256 * 1024**2, help="memory per child"
    )
    parser.add_argument(
        "--orphan-children",
        action="store_true",
        help="children outlive the parent (a crashed script's DataLoader workers)",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="burn CPU while GPU-idle, in the children if any (dataloader-bound)",
    )
    parser.add_argument(
        "--serve",
        type=int,
        metavar="PORT",
        help='also answer HTTP inference requests on PORT (POST {"max_tokens": N}): SM '
        "work and CPU follow the requests served; run it with --phases idle for a service",
    )
    parser.add_argument(
        "--serve-address",
        default="127.0.0.1",
        metavar="ADDR",
        help="where --serve listens (default 127.0.0.1: loopback only, not a service to other "
        "hosts; 0.0.0.0 makes it one)",
    )
    parser.add_argument(
        "--rank",
        action="store_true",
        help="hold a distributed rank's sockets, as NCCL's bootstrap does: a listener on every "
        "interface, on a port the kernel picks (exporter/sim/ranks.py)",
    )
    parser.add_argument(
        "--rank-store",
        type=int,
        metavar="PORT",
        help="also listen on every interface at PORT as rank 0's TCPStore does (start it with "
        "MASTER_PORT=PORT); implies --rank",
    )
    parser.add_argument(
        "--rank-peer",
        type=int,
        metavar="PORT",
        help="also hold a silent connection to another rank's listener on this node; implies "
        "--rank",
    )
    parser.add_argument("--tick", type=argtypes.duration, default=0.5, help=argparse.SUPPRESS)
    parser.add_argument(
        "--user",
        metavar="ACCOUNT",
        help="run as this account once started (root only): its processes are that user's, "
        "as /proc and the exporter see them, though the interpreter is root's to start",
    )


def spec_from_args(args: argparse.Namespace) -> WorkloadSpec:
    return WorkloadSpec(
        directory=args.dir,
        gpu=args.gpu,
        memory=args.memory,
        phases=parse_phases(args.phases),
        util=args.util,
        log=args.log,
        heartbeat=args.heartbeat,
        heartbeat_dir=args.heartbeat_dir,
        ignore_sigterm=args.ignore_sigterm,
        children=args.children,
        child_memory=args.child_memory,
        orphan_children=args.orphan_children,
        cpu=args.cpu,
        tick=args.tick,
        user=args.user,
        serve=args.serve,
        serve_address=args.serve_address,
        rank=args.rank or args.rank_store is not None or args.rank_peer is not None,
        rank_store=args.rank_store,
        rank_peer=args.rank_peer,
    )


def _report(
    spec: WorkloadSpec,
    pid: int,
    ticks: int,
    memory: int,
    util: int,
    extra: dict[str, object],
    gpu: int | None = None,
) -> None:
    """Publish what this process holds; the simulated NVML reads it."""
    where = spec.gpu if gpu is None else gpu
    state = ProcState(pid, ticks, where, memory, util, updated=time.time(), extra=extra)
    write_proc(spec.directory, state)


class _Stop(Exception):
    """Raised from the SIGTERM handler to unwind and clean up."""


def _driver_hold(spec: WorkloadSpec, pid: int) -> tuple[bool, int | None]:
    """Locked or checkpointed (exporter/sim/checkpoint.py): no CUDA work, so no progress and
    nothing reported (True); else it runs, on the GPU the driver restored it to (None: where
    it was started). Every tick, the process's word that it acts on its state."""
    state, gpu = placement(spec.directory, pid)
    if gpu is None:
        return False, None  # never locked
    acknowledge(spec.directory, pid, state)
    return state in (ProcessState.LOCKED, ProcessState.CHECKPOINTED), gpu


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Stop


def _burn_cpu(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    value = 0
    while time.monotonic() < deadline:
        value = (value * 31 + 7) % 1_000_003


class Workload:
    def __init__(self, spec: WorkloadSpec) -> None:
        self.spec = spec
        self.pid = os.getpid()
        self.ticks = start_ticks(self.pid) or 0
        self.children: list[int] = []
        self.gpu = spec.gpu  # where the driver runs it (another GPU after a restore)
        self.step = 0
        self.last_log = 0.0
        self.cues: list[float] = []  # monotonic times of SIGUSR1
        self.heartbeat = None
        self.server = None
        if spec.serve is not None:
            from exporter.sim.serving import InferenceServer

            try:
                self.server = InferenceServer(spec.serve_address, spec.serve)
            except OSError as exc:
                where = f"{spec.serve_address}:{spec.serve}"
                raise CommandError(f"--serve: cannot listen on {where}: {exc.strerror}") from None
        self.ranks = None
        if spec.rank:
            from exporter.sim.ranks import RankSockets

            try:
                self.ranks = RankSockets(spec.rank_store, spec.rank_peer)
            except OSError as exc:
                raise CommandError(f"--rank-store {spec.rank_store}: {exc.strerror}") from None
        if spec.heartbeat:
            from exporter.heartbeat import Heartbeat

            self.heartbeat = Heartbeat(spec.heartbeat_dir, min_interval=spec.tick)

    def report(self, memory: int, util: int, phase: str) -> None:
        extra: dict[str, object] = {"phase": phase, "step": self.step}
        if self.spec.rank:
            extra["nccl"] = True  # a rank of a multi-process job: the driver cannot checkpoint it
        _report(self.spec, self.pid, self.ticks, memory, util, extra, self.gpu)

    def stopped_by_the_driver(self) -> bool:
        stopped, gpu = _driver_hold(self.spec, self.pid)
        if gpu is not None:
            self.gpu = gpu
        return stopped

    def write_progress(self, out: TextIO) -> None:
        now = time.monotonic()
        if now - self.last_log >= LOG_INTERVAL_SECONDS:
            out.write(f"step {self.step} loss {1.0 / (1 + self.step):.4f}\n")
            out.flush()
            self.last_log = now
        if self.heartbeat is not None:
            self.heartbeat.beat(epoch=self.step // 100, step=self.step)

    def spawn_children(self) -> None:
        for _ in range(self.spec.children):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    _Child(self.spec, parent=self.pid).run()
                except BaseException:
                    code = 1
                os._exit(code)
            self.children.append(pid)

    def stop_children(self) -> None:
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in self.children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def run(self) -> int:
        spec = self.spec
        load_node(spec.directory)  # fail early with a clear message
        out: TextIO = open(spec.log, "a") if spec.log else sys.stdout  # noqa: SIM115
        started = time.monotonic()
        signal.signal(signal.SIGUSR1, lambda signum, frame: self.cues.append(time.monotonic()))
        try:
            self.spawn_children()
            if self.server is not None:
                self.server.start()
            if self.ranks is not None:
                try:
                    self.ranks.start()
                except OSError as exc:
                    peer = spec.rank_peer
                    raise CommandError(f"--rank-peer {peer}: {exc.strerror or exc}") from None
            # The phase program's clock: work (load, busy) does not advance while the driver
            # holds the process (locked or checkpointed); the rest (idle: its owner away,
            # a hang) is the world's time and runs on.
            held = 0.0
            while True:
                now = time.monotonic()
                cues = tuple(cue - started - held for cue in self.cues)
                current = phase_at(spec.phases, now - started - held, cues)
                name = current.phase.name
                if name == "done":  # the job finished: exit 0, memory released below
                    return 0
                if self.stopped_by_the_driver():
                    time.sleep(spec.tick)
                    if name in WORK_PHASES:
                        held += time.monotonic() - now
                    continue
                if self.server is not None and self.server.busy(spec.tick):
                    jitter = random.randint(-3, 3)
                    self.report(spec.memory, max(1, min(100, spec.util + jitter)), "serving")
                elif name == "load":
                    total = current.phase.seconds or 1.0
                    fraction = min(1.0, 0.05 + 0.95 * current.elapsed_in_phase / total)
                    self.report(int(spec.memory * fraction), 0, name)
                elif name == "busy":
                    self.step += 1
                    jitter = random.randint(-3, 3)
                    self.report(spec.memory, max(1, min(100, spec.util + jitter)), name)
                    self.write_progress(out)
                elif name == "idle":
                    self.report(spec.memory, 0, name)
                else:  # hang: NCCL spin at 100 %, no progress
                    self.report(spec.memory, 100, name)
                spent = time.monotonic() - now
                if name == "idle" and spec.cpu and not self.children:
                    _burn_cpu(max(0.0, spec.tick - spent))
                else:
                    time.sleep(max(0.0, spec.tick - spent))
        except (_Stop, KeyboardInterrupt):
            return 0
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if self.server is not None:
                self.server.close()
            if self.ranks is not None:
                self.ranks.close()
            self.stop_children()
            proc_path(spec.directory, self.pid).unlink(missing_ok=True)
            if self.heartbeat is not None:
                self.heartbeat.close()
            if out is not sys.stdout:
                out.close()


class _Child:
    """A DataLoader-like worker: holds a little GPU memory, does no GPU work. With no work
    in flight it stops at once when the driver locks it, as the process itself does."""

    def __init__(self, spec: WorkloadSpec, parent: int) -> None:
        self.spec = spec
        self.parent = parent
        self.pid = os.getpid()
        self.ticks = start_ticks(self.pid) or 0

    def run(self) -> None:
        signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            while self.spec.orphan_children or os.getppid() == self.parent:
                stopped, gpu = _driver_hold(self.spec, self.pid)
                if stopped:
                    time.sleep(self.spec.tick)
                    continue
                extra = {"phase": "worker", "parent": self.parent}
                _report(self.spec, self.pid, self.ticks, self.spec.child_memory, 0, extra, gpu)
                if self.spec.cpu:  # the workers do the CPU work of a dataloader-bound job
                    _burn_cpu(self.spec.tick)
                else:
                    time.sleep(self.spec.tick)
        except (_Stop, KeyboardInterrupt):
            pass
        finally:
            proc_path(self.spec.directory, self.pid).unlink(missing_ok=True)


def sim_run_args(directory: Path, *, gpu: int, memory: str, phases: str, tick: str) -> list[str]:
    """`gpu-reclaimer` arguments, from `sim run` on, for one workload (options may follow):
    one place for the demo stack, the chaos run and the tests."""
    return [
        "sim",
        "run",
        "--dir",
        str(directory),
        "--gpu",
        str(gpu),
        "--memory",
        memory,
        "--phases",
        phases,
        "--tick",
        tick,
    ]


def workload_argv(args: argparse.Namespace) -> list[str]:
    """The parsed workload options as a command line again, for a re-exec under a name."""
    argv = ["--dir", str(args.dir), "--gpu", str(args.gpu), "--memory", str(args.memory)]
    argv += ["--phases", args.phases, "--util", str(args.util), "--tick", str(args.tick)]
    argv += ["--children", str(args.children), "--child-memory", str(args.child_memory)]
    if args.log:
        argv += ["--log", str(args.log)]
    if args.heartbeat_dir:
        argv += ["--heartbeat-dir", str(args.heartbeat_dir)]
    if args.user:
        argv += ["--user", args.user]
    if args.serve is not None:
        argv += ["--serve", str(args.serve), "--serve-address", args.serve_address]
    if args.rank_store is not None:
        argv += ["--rank-store", str(args.rank_store)]
    if args.rank_peer is not None:
        argv += ["--rank-peer", str(args.rank_peer)]
    flags = ("heartbeat", "ignore_sigterm", "orphan_children", "cpu", "rank")
    argv += [f"--{flag.replace('_', '-')}" for flag in flags if getattr(args, flag)]
    return argv


def become(user: str) -> None:
    """Drop from root to `user` (its primary group, no other groups) for good."""
    account = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)


def run_workload(spec: WorkloadSpec) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN if spec.ignore_sigterm else _on_sigterm)
    workload = Workload(spec)  # everything it imports, imported while still root
    if spec.user:
        become(spec.user)
    return workload.run()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a simulated GPU workload (see 'sim run')")
    add_workload_arguments(parser)
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    return run_workload(spec)


if __name__ == "__main__":
    sys.exit(main())
