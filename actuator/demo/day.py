"""A measured simulated day: a seeded job mix on a simulated multi-GPU node, scheduled from a
queue, run once with the actuator observing and once enforcing, same seed; then the brief's
before/after table (utilisation, jobs completed per GPU, queue wait) measured on it.

The jobs are real `gpu-reclaimer sim run` processes, the stack is the demo's (exporter,
Prometheus with the shipped rules, Alertmanager, actuator), and time is compressed by the
stack's scale: every rule window, `for:`, grace period and job duration shrinks by the same
factor, so one simulated hour takes 3600 x scale seconds.

`plan_day` is pure (seeded); `Scheduler` is the one place jobs are started, on a FIFO queue
with one job per GPU, the way a batch scheduler hands out whole GPUs.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TextIO

from actuator.audit import Event
from actuator.demo.accounts import owner_of
from actuator.demo.notebook_tab import NotebookTab
from actuator.models import Reason
from actuator.promql_duration import format_promql_duration
from exporter.sim.state import load_node

if TYPE_CHECKING:
    from actuator.demo.stack import Stack, StackOptions, Workload

# Kinds of job: trainings and debug runs work until they finish; a paused session stops
# working for a while (its owner at lunch, in a meeting) and then works again and finishes;
# the others stop working for good but keep their GPU memory until someone (the actuator)
# frees it.
WORKING = ("training", "debug", "redo")  # never idle: signalling one is harm
FINISHING = (*WORKING, "paused")  # exits by itself if left alone
# An owner who comes back from a pause and finds the session killed starts it again: a
# "redo" of the whole work (what was done before the pause is lost, counted as such).
KINDS: dict[str, float] = {  # share of the day's jobs
    "training": 0.45,
    "debug": 0.10,
    "paused": 0.10,  # idle, then working again: reclaiming it loses its owner's work
    "notebook": 0.15,  # a notebook tab closed: the kernel keeps its CUDA context
    "crashed": 0.12,  # the loop crashed; the process and its DataLoader workers live on
    "hung": 0.08,  # a 2-GPU run whose peer died: NCCL spins at 100 %, no progress
}
# An abandoned job's owner notices it and ends it (closes the notebook, kills the leftover
# workers) at some time in this many hours after it stopped working: owners do come back,
# which is why a real cluster wastes hours per GPU a day, not the whole day. None: never.
NOTICED_WITHIN_H: float | None = 4.0
# Whose notebook tab stays connected (owner presence, exporter/presence.py): most paused
# sessions' owners leave the tab open on their laptop; some abandoned notebooks' tabs are
# never closed either (the case JupyterHub's culler sets `cull_connected` for). Drawn from
# their own seeded stream, so the day's jobs are the same as without them.
TAB_OPEN_SHARE = {"paused": 0.8, "notebook": 0.2}
# How long past the grace an owner's presence holds a reclaim in the presence modes.
PRESENCE_GRACE_H = 2.0
NOTICED_AFTER_H = 0.5  # the soonest an owner notices
# How many jobs arrive per GPU per day (the default day's load: the queue is rarely empty in
# working hours).
JOBS_PER_GPU = 8.0
# Hours of the day jobs arrive in, weighted: most arrive in working hours.
ARRIVAL_WEIGHTS = [1, 1, 1, 1, 1, 1, 1, 2, 3, 4, 4, 4, 3, 4, 4, 4, 3, 3, 2, 2, 2, 1, 1, 1]
# A reclaimed GPU that no job takes within this long was reclaimed for nothing.
NEEDLESS_WINDOW_H = 1.0
MODES = ("observe", "enforce", "demand", "suspend", "presence", "suspend-presence")
MODE_NAMES = {
    "observe": "observe (nothing reclaimed)",
    "enforce": "enforce, reclaim_when: idle",
    "demand": "enforce, reclaim_when: demand",
    "suspend": "enforce, idle, suspend rung",
    "presence": f"enforce, idle, presence held {PRESENCE_GRACE_H:g} h",
    "suspend-presence": "enforce, idle, suspend rung and presence",
}
OWNER_KEEPS_FOR = "2h"  # what an owner back from a pause asks when the session is suspended
CAVEAT = (
    "Measured on a simulation: a seeded job mix on a simulated node, time compressed; the "
    "shape of the difference is what it shows, not a promise for a real fleet."
)


@dataclass(frozen=True)
class Job:
    id: int
    kind: str
    arrival_h: float  # hours after the day's start
    gpus: int
    busy_h: float  # work done before it finishes (or stops working)
    memory_gib: int
    user: str = ""  # whose job (actuator/demo/accounts.py); "" or not usable: the caller's
    pause_h: float = 0.0  # a paused session: how long it stops working, half way through
    noticed_h: float | None = None  # abandoned: when its owner ends it, after it stopped
    redo_of: int | None = None  # a redo: the paused job whose killed session it starts again
    tab_open: bool = False  # its owner's notebook tab stays connected while it runs

    @property
    def finishes(self) -> bool:
        return self.kind in FINISHING

    @property
    def resumes(self) -> bool:
        """Stops working for a while, then works again: reclaimed, its work is lost."""
        return self.kind == "paused"

    def load_h(self, scale: float) -> float:
        return max(0.3, 120 * scale) / 3600 / scale

    def back_h(self, scale: float) -> float:
        """A paused session: hours after its start that its owner is back (the pause over)."""
        return self.load_h(scale) + self.busy_h / 2 + self.pause_h

    def ends_h(self, scale: float) -> float:
        """Hours after its start a finishing job ends if nothing stops it."""
        return self.load_h(scale) + self.busy_h + self.pause_h

    def phases(self, scale: float) -> str:
        load = f"load={max(0.3, 120 * scale):.2f}s"
        if self.resumes:
            half = f"busy={max(0.5, self.busy_h / 2 * 3600 * scale):.2f}s"
            pause = f"idle={max(0.5, self.pause_h * 3600 * scale):.2f}s"
            return f"{load},{half},{pause},{half},done"
        busy = f"busy={max(0.5, self.busy_h * 3600 * scale):.2f}s"
        if self.finishes:
            return f"{load},{busy},done"
        stopped = "hang" if self.kind == "hung" else "idle"
        if self.noticed_h is None:
            return f"{busy},{stopped}"
        return f"{busy},{stopped}={max(0.5, self.noticed_h * 3600 * scale):.2f}s,done"


def day_mix(count: int) -> list[str]:
    """How many jobs of each kind a day of `count` jobs has: KINDS' shares, apportioned by
    largest remainder, so a small day has the stated mix rather than a seed's luck (20
    jobs drawn one by one can be half abandoned)."""
    exact = {kind: share * count / sum(KINDS.values()) for kind, share in KINDS.items()}
    counts = {kind: int(x) for kind, x in exact.items()}
    by_remainder = sorted(
        KINDS, key=lambda kind: (counts[kind] - exact[kind], list(KINDS).index(kind))
    )
    for kind in by_remainder[: count - sum(counts.values())]:
        counts[kind] += 1
    return [kind for kind in KINDS for _ in range(counts[kind])]


def plan_day(
    seed: int,
    *,
    hours: float = 24.0,
    gpus: int = 4,
    jobs_per_gpu: float = JOBS_PER_GPU,
    noticed_within_h: float | None = NOTICED_WITHIN_H,
) -> list[Job]:
    """The day's jobs, in arrival order; the same seed gives the same day."""
    rng = random.Random(seed)
    count = max(1, round(jobs_per_gpu * gpus * hours / 24))
    kinds = day_mix(count)
    rng.shuffle(kinds)
    hour_weights = [ARRIVAL_WEIGHTS[int(h) % 24] for h in range(math.ceil(hours))]
    jobs = []
    for n, kind in enumerate(kinds):
        hour = rng.choices(range(len(hour_weights)), hour_weights)[0]
        arrival = min(hours, hour + rng.random())
        busy = {
            "training": rng.uniform(1.0, 3.5),
            "debug": rng.uniform(0.1, 0.4),
            "paused": rng.uniform(0.5, 2.0),
            "notebook": rng.uniform(0.2, 1.0),
            "crashed": rng.uniform(0.3, 1.5),
            "hung": rng.uniform(0.5, 2.0),
        }[kind]
        jobs.append(
            Job(
                n,
                kind,
                arrival,
                2 if kind == "hung" and gpus >= 2 else 1,
                busy,
                rng.choice((8, 16, 24, 40, 60)),
                pause_h=rng.uniform(0.5, 2.0) if kind == "paused" else 0.0,
                noticed_h=_noticed(rng, kind, noticed_within_h),
            )
        )
    jobs.sort(key=lambda j: (j.arrival_h, j.id))
    tabs = random.Random(f"tabs-{seed}")
    return [
        replace(
            j,
            id=i,
            user=owner_of(i, seed),
            tab_open=tabs.random() < TAB_OPEN_SHARE.get(j.kind, 0.0),
        )
        for i, j in enumerate(jobs)
    ]


def _noticed(rng: random.Random, kind: str, within_h: float | None) -> float | None:
    if kind in FINISHING or within_h is None:
        return None
    return rng.uniform(min(NOTICED_AFTER_H, within_h), within_h)


@dataclass
class Run:
    """One job as the scheduler ran it."""

    job: Job
    gpus: tuple[int, ...] = ()
    workloads: list[Workload] = field(default_factory=list)
    started_h: float | None = None
    ended_h: float | None = None
    waiter: subprocess.Popen[str] | None = None  # its `gpu-reclaimer wait`, while queued
    back: bool = False  # a paused session whose owner came back
    resumed: bool = False  # ... and found it suspended, and kept it (which resumes it)
    redone: bool = False  # ... and found it killed, and started it again
    tab: NotebookTab | None = None  # its owner's notebook tab, while the job runs


def given_gpus(output: str) -> tuple[int, ...]:
    """The GPUs `gpu-reclaimer wait` printed (its last line: export CUDA_VISIBLE_DEVICES=0,2)."""
    lines = output.strip().splitlines()
    last = lines[-1].removeprefix("export ") if lines else ""
    if not last.startswith("CUDA_VISIBLE_DEVICES="):
        return ()
    return tuple(int(g) for g in last.split("=", 1)[1].split(",") if g.isdigit())


class Scheduler:
    """The node's wait list as the queue, the way users of a host without a batch scheduler
    queue: each job that arrives runs `gpu-reclaimer wait --gpus N` and starts on the GPUs it
    is given (first come first; a job the free GPUs cannot serve yet lets a smaller one go
    ahead). A job holds its GPUs until every process of it has exited. The actuator sees
    the same queue: under `reclaim_when: demand` it is the demand."""

    def __init__(self, stack: Stack, jobs: Sequence[Job], gpus: int, scale: float) -> None:
        self.stack, self.gpus, self.scale = stack, gpus, scale
        self.runs = [Run(job) for job in jobs]
        self.t0 = time.monotonic()
        self.t0_wall = time.time()
        self.peak_host = 0  # bytes the node's checkpoints held at once, at most

    def now_h(self) -> float:
        return (time.monotonic() - self.t0) / self.scale / 3600

    def hour_of(self, wall: float) -> float:
        return (wall - self.t0_wall) / self.scale / 3600

    @property
    def queue(self) -> list[Run]:
        return [r for r in self.runs if r.waiter is not None]

    def busy_gpus(self) -> set[int]:
        return {
            g for r in self.runs if r.started_h is not None and r.ended_h is None for g in r.gpus
        }

    def tick(self) -> None:
        now = self.now_h()
        for run in self.runs:
            running = run.started_h is not None and run.ended_h is None
            if running and not any(w.alive() for w in run.workloads):
                run.ended_h = now
            if run.ended_h is not None and run.tab is not None:
                run.tab.close()
                run.tab = None
        for run in list(self.runs):
            self._owner_back(run, now)
        from exporter.sim.checkpoint import host_memory_used

        self.peak_host = max(self.peak_host, host_memory_used(self.stack.node_dir))
        for run in self.runs:
            if run.started_h is not None or run.job.arrival_h > now:
                continue
            if run.waiter is None:
                run.waiter = self._wait(run.job.gpus)
            elif run.waiter.poll() is not None:
                output = run.waiter.stdout.read() if run.waiter.stdout else ""
                gpus, run.waiter = given_gpus(output), None
                if len(gpus) == run.job.gpus:
                    self.start(run, gpus, now)
                # else the wait failed (its error is in the actuator's log): it waits again

    def _owner_back(self, run: Run, now: float) -> None:
        """A paused session's owner, back from the pause: a suspended session is kept (the
        keep resumes it); a killed one is started again from the beginning (a redo)."""
        job = run.job
        if not job.resumes or run.back or run.started_h is None:
            return
        if now < run.started_h + job.back_h(self.scale):
            return
        run.back = True
        if run.ended_h is not None:  # killed while its owner was away
            run.redone = True
            redo = replace(
                job,
                id=len(self.runs),
                kind="redo",
                arrival_h=now,
                pause_h=0.0,
                redo_of=job.id,
            )
            self.runs.append(Run(redo))
            return
        from exporter.sim import checkpoint as sim

        for w in run.workloads:
            with contextlib.suppress(sim.CheckpointError):
                if sim.get_state(self.stack.node_dir, w.pid) == sim.ProcessState.CHECKPOINTED:
                    run.resumed = True
                    subprocess.Popen(
                        self.stack.keep_command(str(w.pid), "--for", OWNER_KEEPS_FOR),
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )

    def user_of(self, job: Job) -> str | None:
        """The account the job runs as: its owner's, where the stack has it."""
        return job.user if job.user in self.stack.options.users else None

    def _wait(self, gpus: int) -> subprocess.Popen[str]:
        """Join the wait list; returns once the actuator has queued the job (so the queue
        keeps the order jobs arrived in). The scheduler queues for its users, as a batch
        system's daemon does: the wait list shows the caller, the GPUs the jobs' owners."""
        from actuator.demo.stack import StackError

        waiter = subprocess.Popen(
            self.stack.wait_command("--gpus", str(gpus), "--for", "7d"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert waiter.stderr is not None
        said = waiter.stderr.readline()  # "waiting on NODE (position N ...)"
        if not said.startswith("waiting on"):
            waiter.wait(10)
            raise StackError(f"the wait list refused a job: {said.strip()}")
        return waiter

    def start(self, run: Run, gpus: tuple[int, ...], now: float) -> None:
        job = run.job
        run.gpus, run.started_h = gpus, now
        # A tab is its owner's presence for the kernel under that notebook server: only where
        # the job runs as its owner's own account (run as the caller, every job's owner would
        # be "present").
        tabbed = job.tab_open and self.user_of(job) is not None
        for rank, gpu in enumerate(gpus):
            run.workloads.append(
                self.stack.spawn(
                    f"job {job.id} {job.kind} rank {rank}",
                    phases=job.phases(self.scale),
                    gpu=gpu,
                    memory=f"{job.memory_gib}GiB",
                    name="python",
                    heartbeat=job.kind in ("training", "hung"),
                    children=2 if job.kind == "crashed" else 0,
                    wait=False,
                    user=self.user_of(job),
                    notebook=tabbed and rank == 0,
                )
            )
        port = run.workloads[0].notebook_port if run.workloads else None
        if tabbed and port is not None:
            run.tab = NotebookTab(port)

    def run_until(
        self,
        hours: float,
        progress: Callable[[float], None],
        stop_when: Callable[[Scheduler], bool] | None = None,
    ) -> float:
        """Run the day to `hours`, or until `stop_when` says so; the hours that ran."""
        last = -1
        try:
            while (now := self.now_h()) < hours:
                self.tick()
                if stop_when is not None and stop_when(self):
                    return now
                if int(now) != last:
                    last = int(now)
                    progress(now)
                time.sleep(0.1)
            self.tick()
            return hours
        finally:
            for run in self.runs:
                if run.waiter is not None and run.waiter.poll() is None:
                    run.waiter.kill()
                    run.waiter.wait(10)
                if run.tab is not None:
                    run.tab.close()
                    run.tab = None


@dataclass(frozen=True)
class DayFigures:
    mode: str
    hours: float
    gpus: int
    utilisation: float | None
    completed: int
    started: int
    waiting_at_end: int
    mean_wait_h: float | None  # of the jobs that started
    mean_wait_all_h: float | None  # every job that arrived; one still waiting: until the end
    idle_gpu_hours: float | None
    reclaimed: int  # processes
    harmed: int  # working jobs (training, debug) the actuator signalled: must be 0
    lost: int = 0  # paused sessions reclaimed while their owner was away: their work lost
    needless: int = 0  # reclaimed GPUs no job took within NEEDLESS_WINDOW_H
    jobs_reclaimed: int = 0  # jobs with a process reclaimed (a crashed job: three processes)
    idle_kwh: float | None = None  # what idle processes' share of their GPUs' draw burned
    demand_to_free_h: float | None = None  # median, demand mode: from the wait to the GPU
    work_lost_gpu_h: float = 0.0  # work done, then thrown away by a kill (owners redo it)
    redone: int = 0  # killed sessions their owners started again
    suspended: int = 0  # processes the suspend rung checkpointed
    resumed: int = 0  # paused sessions found suspended by their owner, and resumed
    ceiling: int = 0  # finishing jobs that could complete in the day if started on arrival
    peak_host_gib: float = 0.0  # the most host memory checkpoints held at once
    held_present: int = 0  # processes whose reclaim waited for their owner's presence

    @property
    def jobs_per_gpu_day(self) -> float:
        return self.completed / self.gpus * 24 / self.hours

    @property
    def gpu_hours_per_job(self) -> float | None:
        return self.gpus * self.hours / self.completed if self.completed else None

    @property
    def ceiling_per_gpu_day(self) -> float:
        return self.ceiling / self.gpus * 24 / self.hours


def needless_reclaims(
    scheduler: Scheduler, cases: Sequence[dict[str, Any]], uuids: Sequence[str], hours: float
) -> int:
    """Reclaimed GPUs that no job started on within NEEDLESS_WINDOW_H (ground truth: the
    scheduler's record); one reclaimed too near the day's end to be judged is not counted."""
    count = 0
    for c in cases:
        if c["state"] != "reclaimed" or c.get("ended_at") is None:
            continue
        freed_h = scheduler.hour_of(c["ended_at"])
        if freed_h + NEEDLESS_WINDOW_H > hours or c["target"]["uuid"] not in uuids:
            continue
        gpu = uuids.index(c["target"]["uuid"])
        taken = any(
            gpu in r.gpus
            and r.started_h is not None
            and freed_h <= r.started_h < freed_h + NEEDLESS_WINDOW_H
            for r in scheduler.runs
        )
        count += not taken
    return count


def demand_to_free(stack: Stack, scheduler: Scheduler) -> float | None:
    """Median simulated hours from a wait choosing a GPU to that GPU being free (audit)."""
    waits = []
    with contextlib.suppress(OSError):
        for line in stack.audit_log.read_text().splitlines():
            record = json.loads(line)
            if record.get("event") == Event.FREED_FOR_REQUEST:
                waits.append(record["seconds_from_demand"] / scheduler.scale / 3600)
    return statistics.median(waits) if waits else None


def measure(stack: Stack, scheduler: Scheduler, mode: str, hours: float) -> DayFigures:
    runs = scheduler.runs
    span = format_promql_duration(max(1, round(hours * 3600 * scheduler.scale)))
    step = format_promql_duration(max(stack.interval, 0.05))
    util = stack.query(f"avg(avg_over_time(gpu_utilization_ratio[{span}]))")
    idle = stack.query(
        "sum(count_over_time((max by (instance, gpu, uuid) (gpu_process:idle_condition or "
        f"gpu_process:stalled_condition))[{span}:{step}]))"
    )
    samples = float(idle[0]["value"][1]) if idle else 0.0
    idle_hours = samples * stack.interval / scheduler.scale / 3600
    # Watts summed over the evaluations, x the simulated hours each stands for.
    watts = stack.query(f"sum(sum_over_time(gpu_process:idle_power_watts[{span}:{step}]))")
    idle_kwh = (
        float(watts[0]["value"][1]) * stack.interval / scheduler.scale / 3600 / 1000
        if watts
        else None
    )
    cases = stack.actuator_api("/api/v1/cases", limit=1000)["cases"]
    signalled = {"terminating", "killing", "reclaimed", "failed"}
    signalled_pids = {c["target"]["pid"] for c in cases if c["state"] in signalled}
    working_pids = {w.pid for r in runs if r.job.kind in WORKING for w in r.workloads}
    harmed = len(signalled_pids & working_pids)
    cut = [r for r in runs if r.job.finishes and any(w.pid in signalled_pids for w in r.workloads)]
    # A paused session killed in its pause had done its first half: that work is lost.
    work_lost = sum(
        (r.job.busy_h / 2 if r.job.resumes else (r.ended_h or hours) - (r.started_h or 0.0))
        * r.job.gpus
        for r in cut
    )
    suspends, held_present = 0, set()
    with contextlib.suppress(OSError):
        for line in stack.audit_log.read_text().splitlines():
            record = json.loads(line)
            if record.get("event") == Event.CHECKPOINT and record.get("call") == "SUSPEND":
                suspends += bool(record.get("ok"))
            if record.get("event") == Event.DECISION and record.get("code") == Reason.OWNER_PRESENT:
                held_present.add(record.get("case"))
    ceiling = sum(
        1
        for r in runs
        if r.job.finishes
        and r.job.redo_of is None
        and r.job.arrival_h + r.job.ends_h(scheduler.scale) <= hours
    )
    reclaimed_pids = [c["target"]["pid"] for c in cases if c["state"] == "reclaimed"]
    # A job signalled has not completed, though its processes have ended.
    cut_short = {r.job.id for r in runs if any(w.pid in signalled_pids for w in r.workloads)}
    uuids = [g.uuid for g in load_node(stack.node_dir).gpus]
    waits = [r.started_h - r.job.arrival_h for r in runs if r.started_h is not None]
    all_waits = waits + [
        hours - r.job.arrival_h for r in runs if r.started_h is None and r.job.arrival_h < hours
    ]
    return DayFigures(
        mode=mode,
        hours=hours,
        gpus=scheduler.gpus,
        utilisation=float(util[0]["value"][1]) if util else None,
        completed=sum(
            1
            for r in runs
            if r.job.finishes and r.ended_h is not None and r.job.id not in cut_short
        ),
        started=len(waits),
        waiting_at_end=sum(1 for r in runs if r.started_h is None and r.job.arrival_h < hours),
        mean_wait_h=statistics.fmean(waits) if waits else None,
        mean_wait_all_h=statistics.fmean(all_waits) if all_waits else None,
        idle_gpu_hours=idle_hours,
        reclaimed=len(reclaimed_pids),
        jobs_reclaimed=sum(1 for r in runs if any(w.pid in reclaimed_pids for w in r.workloads)),
        harmed=harmed,
        lost=sum(1 for r in runs if r.job.resumes and r.job.id in cut_short),
        needless=needless_reclaims(scheduler, cases, uuids, hours),
        demand_to_free_h=demand_to_free(stack, scheduler),
        idle_kwh=idle_kwh,
        work_lost_gpu_h=work_lost,
        redone=sum(1 for r in runs if r.redone),
        suspended=suspends,
        resumed=sum(1 for r in runs if r.resumed),
        ceiling=ceiling,
        peak_host_gib=scheduler.peak_host / 1024**3,
        held_present=len(held_present),
    )


def mode_policy(base: Mapping[str, Any], mode: str, scale: float) -> dict[str, Any]:
    """The actuator's policy for one of the day's modes, its durations at `scale`."""
    policy: dict[str, Any] = {**base, "mode": "observe" if mode == "observe" else "enforce"}
    defaults = dict(policy.get("defaults", {}))
    if mode in ("presence", "suspend-presence"):
        defaults["presence_grace"] = f"{PRESENCE_GRACE_H * 3600 * scale:g}s"
    if mode in ("suspend", "suspend-presence"):
        defaults |= {
            "suspend": True,
            "suspend_max": f"{max(60.0, 24 * 3600 * scale):g}s",
            "suspend_host_reserve": "1GiB",
        }
    if mode == "demand":
        defaults["reclaim_when"] = "demand"
        policy["demand"] = {"wait_list": True, "interval": f"{max(0.2, 60 * scale):g}s"}
    if defaults:
        policy["defaults"] = defaults
    return policy


def run_day(
    options: StackOptions,
    jobs: Sequence[Job],
    hours: float,
    mode: str,
    progress: Callable[[str], None] = lambda _: None,
    stop_when: Callable[[Scheduler], bool] | None = None,
) -> DayFigures:
    """One compressed day with the actuator in `mode`: observe, enforce (reclaim when idle)
    or demand (enforce, reclaim only for a waiting job: the wait list is the demand).

    `stop_when` ends the day early, once what it waits for has happened (the figures then
    cover the hours that ran): a test waits for events, not for a fixed span of time."""
    from actuator.demo.stack import Stack

    policy = mode_policy(options.policy, mode, options.scale)
    options = replace(options, policy=policy, label=f"day-{mode}")
    if "presence" in mode and not options.users:
        progress(f"{mode}: every job runs as you (no day accounts): no owner's tab is told apart")
    with Stack(options) as stack:
        stack.wait_scraped()
        progress(f"{mode}: stack up in {stack.run_dir}")
        scheduler = Scheduler(stack, jobs, options.gpus, options.scale)
        ran = scheduler.run_until(
            hours,
            lambda h: progress(
                f"{mode}: hour {h:4.1f} of {hours:g}, {len(scheduler.queue)} queued, "
                f"{len(scheduler.busy_gpus())}/{options.gpus} GPUs allocated"
            ),
            stop_when,
        )
        figures = measure(stack, scheduler, mode, ran)
        record = stack.run_dir / "day-jobs.json"
        record.write_text(
            json.dumps(
                [
                    {
                        "id": r.job.id,
                        "kind": r.job.kind,
                        "arrival_h": round(r.job.arrival_h, 3),
                        "gpus": list(r.gpus),
                        "started_h": r.started_h,
                        "ended_h": r.ended_h,
                        "pids": [w.pid for w in r.workloads],
                    }
                    for r in scheduler.runs
                ],
                indent=1,
            )
        )
    progress(f"{mode}: done; Prometheus data kept in {stack.run_dir / 'prometheus-data'}")
    return figures


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f} %"


def _num(x: float | None, unit: str = "", digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}{unit}"


def table(
    runs: Sequence[DayFigures],
    seed: int,
    scale: float,
    jobs_per_gpu: float = JOBS_PER_GPU,
    noticed_within_h: float | None = NOTICED_WITHIN_H,
) -> str:
    """The day's table, one column per mode, as Markdown; and how demand compares."""
    first = runs[0]

    def row(name: str, value: Callable[[DayFigures], str]) -> str:
        return f"| {name} | " + " | ".join(value(f) for f in runs) + " |"

    rows = [
        row("average GPU utilisation", lambda f: _pct(f.utilisation)),
        row("jobs completed per GPU per day", lambda f: _num(f.jobs_per_gpu_day)),
        row(
            "completion ceiling (every job started on arrival), per GPU per day",
            lambda f: _num(f.ceiling_per_gpu_day),
        ),
        row("work lost (GPU-hours done, then killed)", lambda f: _num(f.work_lost_gpu_h, " h")),
        row("killed sessions their owners started again", lambda f: str(f.redone)),
        row("processes suspended (checkpointed into host memory)", lambda f: str(f.suspended)),
        row("paused sessions resumed by their owner", lambda f: str(f.resumed)),
        row("reclaims held while the owner was present", lambda f: str(f.held_present)),
        row(
            "host memory held by checkpoints (peak)",
            lambda f: _num(f.peak_host_gib, " GiB") if f.suspended else "-",
        ),
        row("GPU-hours per completed job (cost)", lambda f: _num(f.gpu_hours_per_job, " h")),
        row(
            "mean queue wait (a job still waiting: until the end)",
            lambda f: _num(f.mean_wait_all_h, " h"),
        ),
        row("mean queue wait of the jobs that started", lambda f: _num(f.mean_wait_h, " h")),
        row("jobs still waiting at the end", lambda f: str(f.waiting_at_end)),
        row("GPU-hours held by idle or stalled processes", lambda f: _num(f.idle_gpu_hours, " h")),
        row(
            "energy idle processes burned (their share of the GPUs' draw)",
            lambda f: _num(f.idle_kwh, " kWh"),
        ),
        row("processes reclaimed", lambda f: str(f.reclaimed)),
        row("jobs reclaimed (all processes of a job: one)", lambda f: str(f.jobs_reclaimed)),
        row(
            f"needless reclaims (no job took the GPU within {NEEDLESS_WINDOW_H:g} h)",
            lambda f: str(f.needless) if f.reclaimed else "-",
        ),
        row(
            "time from demand to a free GPU (median)",
            lambda f: _num(
                f.demand_to_free_h * 60 if f.demand_to_free_h is not None else None, " min", 0
            ),
        ),
        row(
            "paused sessions reclaimed while their owner was away (work lost)",
            lambda f: str(f.lost),
        ),
        row("working jobs signalled (must be 0)", lambda f: str(f.harmed)),
    ]
    lines = [
        f"Simulated day: {first.hours:g} h on {first.gpus} GPUs, {jobs_per_gpu:g} jobs per GPU "
        f"per day, seed {seed}, time x{scale:g} (1 h = {3600 * scale:g} s), "
        + (
            "abandoned jobs never noticed by their owners"
            if noticed_within_h is None
            else f"owners end an abandoned job within {noticed_within_h:g} h"
        ),
        "",
        "| | " + " | ".join(MODE_NAMES.get(f.mode, f.mode) for f in runs) + " |",
        "|---" * (len(runs) + 1) + "|",
        *rows,
        "",
    ]
    by_mode = {f.mode: f for f in runs}
    verdict = demand_verdict(by_mode)
    if verdict:
        lines += [verdict, ""]
    lines.append(CAVEAT)
    return "\n".join(lines) + "\n"


def demand_verdict(by_mode: dict[str, DayFigures]) -> str:
    """How much of idle's reduction in queue wait demand keeps, for how many reclaims."""
    base, idle, demand = (by_mode.get(m) for m in ("observe", "enforce", "demand"))
    if base is None or idle is None or demand is None:
        return ""
    waits = (base.mean_wait_all_h, idle.mean_wait_all_h, demand.mean_wait_all_h)
    if None in waits or waits[0] == waits[1]:
        return ""
    b, i, d = (w or 0.0 for w in waits)
    kept = (b - d) / (b - i)
    share = demand.reclaimed / idle.reclaimed if idle.reclaimed else 0.0
    jobs = demand.jobs_reclaimed / idle.jobs_reclaimed if idle.jobs_reclaimed else 0.0
    return (
        f"reclaim_when: demand kept {kept:.0%} of idle's reduction in mean queue wait (target "
        f">= 90 %) with {demand.reclaimed} of its {idle.reclaimed} reclaims ({share:.0%}; "
        f"target <= 33 %; of its jobs reclaimed: {demand.jobs_reclaimed} of "
        f"{idle.jobs_reclaimed}, {jobs:.0%}) and {demand.needless} needless reclaim(s) "
        "(target 0)."
    )


def run_modes(
    options: StackOptions,
    seeds: Sequence[int],
    hours: float,
    out: TextIO,
    progress: Callable[[str], None],
    modes: Sequence[str] = MODES,
    jobs_per_gpu: float = JOBS_PER_GPU,
    noticed_within_h: float | None = NOTICED_WITHIN_H,
) -> dict[int, list[DayFigures]]:
    """Each seed's day in every mode, its table written as it ends (the means over several
    seeds: actuator/demo/seeds.py)."""
    by_seed: dict[int, list[DayFigures]] = {}
    for seed in seeds:
        jobs = plan_day(
            seed,
            hours=hours,
            gpus=options.gpus,
            jobs_per_gpu=jobs_per_gpu,
            noticed_within_h=noticed_within_h,
        )
        kinds = {k: sum(1 for j in jobs if j.kind == k) for k in KINDS}
        progress(
            f"seed {seed}: {len(jobs)} jobs: " + ", ".join(f"{n} {k}" for k, n in kinds.items())
        )
        runs = [run_day(options, jobs, hours, mode, progress) for mode in modes]
        out.write(table(runs, seed, options.scale, jobs_per_gpu, noticed_within_h))
        out.flush()
        by_seed[seed] = runs
    return by_seed


def as_dict(figures: DayFigures) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(figures) | {
        "jobs_per_gpu_day": figures.jobs_per_gpu_day,
        "gpu_hours_per_job": figures.gpu_hours_per_job,
    }
