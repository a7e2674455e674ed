"""What each simulated process really did: the phase it reported, sampled from the
simulated node's own process files (the node's ground truth, not the exporter's view).

`Truth` is pure (a timeline per process); `TruthRecorder` fills it from a node directory in
a thread."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from exporter.sim.state import read_procs

IDLE_PHASES = frozenset({"idle", "hang"})  # reclaimable by the idle or the stalled rule


@dataclass
class Timeline:
    pid: int
    ticks: int
    gpu: int
    parent: int | None  # a DataLoader worker's parent PID (its own phase is "worker")
    samples: list[tuple[float, str]] = field(default_factory=list)  # (time, phase) changes
    last_seen: float = 0.0
    node: str = ""  # the simulated node whose GPU it holds

    def phase_at(self, t: float) -> str | None:
        found = None
        for at, phase in self.samples:
            if at > t:
                break
            found = phase
        return found

    def idle_since(self, t: float) -> float | None:
        """Since when it has idled (or hung) without a break up to `t`; None if not at `t`."""
        since = None
        for at, phase in self.samples:
            if at > t:
                break
            if phase not in IDLE_PHASES:
                since = None
            elif since is None:
                since = at
        return since


@dataclass
class Truth:
    timelines: dict[tuple[int, int], Timeline] = field(default_factory=dict)

    def observe(
        self, t: float, pid: int, ticks: int, gpu: int, extra: dict[str, object], node: str = ""
    ) -> None:
        key = (pid, ticks)
        phase = str(extra.get("phase", "?"))
        parent = extra.get("parent")
        line = self.timelines.get(key)
        if line is None:
            line = self.timelines[key] = Timeline(
                pid, ticks, gpu, int(parent) if isinstance(parent, int) else None, node=node
            )
        if not line.samples or line.samples[-1][1] != phase:
            line.samples.append((t, phase))
        line.last_seen = t

    def by_pid(self, pid: int, at: float) -> Timeline | None:
        """The process that had `pid` at time `at` (PIDs are reused: the latest started
        before `at`)."""
        found = [
            line
            for line in self.timelines.values()
            if line.pid == pid and line.samples and line.samples[0][0] <= at + 1.0
        ]
        return max(found, key=lambda line: line.samples[0][0]) if found else None

    def owner(self, line: Timeline, at: float) -> Timeline:
        """A worker's parent process (its phase is the job's), else itself."""
        if line.parent is None:
            return line
        return self.by_pid(line.parent, at) or line


class TruthRecorder:
    def __init__(
        self,
        nodes: Mapping[str, Path],
        *,
        every: float = 0.2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`nodes`: each simulated node's name and directory."""
        self.nodes, self.every, self.clock = dict(nodes), every, clock
        self.truth = Truth()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="truth", daemon=True)

    def start(self) -> TruthRecorder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            now = self.clock()
            for node, node_dir in self.nodes.items():
                for state in read_procs(node_dir):
                    if not os.path.exists(f"/proc/{state.pid}"):
                        continue  # a killed process's file may outlive it: it holds nothing
                    with self._lock:
                        self.truth.observe(
                            now, state.pid, state.start_ticks, state.gpu, state.extra, node
                        )

    def snapshot(self) -> Truth:
        with self._lock:
            return Truth(
                {
                    k: Timeline(
                        v.pid, v.ticks, v.gpu, v.parent, list(v.samples), v.last_seen, v.node
                    )
                    for k, v in self.truth.timelines.items()
                }
            )
