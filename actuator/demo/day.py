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

import json
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from actuator.promql_duration import format_promql_duration

if TYPE_CHECKING:
    from actuator.demo.stack import Stack, StackOptions, Workload

# Kinds of job: trainings and debug runs finish by themselves; the others stop working but
# keep their GPU memory until someone (the actuator) frees it.
FINISHING = ("training", "debug")
KINDS: dict[str, float] = {  # share of the day's jobs
    "training": 0.55,
    "debug": 0.10,
    "notebook": 0.15,  # a notebook tab closed: the kernel keeps its CUDA context
    "crashed": 0.12,  # the loop crashed; the process and its DataLoader workers live on
    "hung": 0.08,  # a 2-GPU run whose peer died: NCCL spins at 100 %, no progress
}
# Hours of the day jobs arrive in, weighted: most arrive in working hours.
ARRIVAL_WEIGHTS = [1, 1, 1, 1, 1, 1, 1, 2, 3, 4, 4, 4, 3, 4, 4, 4, 3, 3, 2, 2, 2, 1, 1, 1]
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

    @property
    def finishes(self) -> bool:
        return self.kind in FINISHING

    def phases(self, scale: float) -> str:
        busy = f"busy={max(0.5, self.busy_h * 3600 * scale):.2f}s"
        if self.finishes:
            return f"load={max(0.3, 120 * scale):.2f}s,{busy},done"
        return f"{busy},{'hang' if self.kind == 'hung' else 'idle'}"


def plan_day(seed: int, *, hours: float = 24.0, gpus: int = 4, jobs_per_gpu: float = 8.0
             ) -> list[Job]:  # fmt: skip
    """The day's jobs, in arrival order; the same seed gives the same day."""
    rng = random.Random(seed)
    count = max(1, round(jobs_per_gpu * gpus * hours / 24))
    kinds, shares = zip(*KINDS.items(), strict=True)
    hour_weights = [ARRIVAL_WEIGHTS[int(h) % 24] for h in range(math.ceil(hours))]
    jobs = []
    for n in range(count):
        kind = rng.choices(kinds, shares)[0]
        hour = rng.choices(range(len(hour_weights)), hour_weights)[0]
        arrival = min(hours, hour + rng.random())
        busy = {
            "training": rng.uniform(1.0, 3.5),
            "debug": rng.uniform(0.1, 0.4),
            "notebook": rng.uniform(0.2, 1.0),
            "crashed": rng.uniform(0.3, 1.5),
            "hung": rng.uniform(0.5, 2.0),
        }[kind]
        jobs.append(Job(n, kind, arrival, 2 if kind == "hung" and gpus >= 2 else 1, busy,
                        rng.choice((8, 16, 24, 40, 60))))  # fmt: skip
    jobs.sort(key=lambda j: (j.arrival_h, j.id))
    return [Job(i, j.kind, j.arrival_h, j.gpus, j.busy_h, j.memory_gib)
            for i, j in enumerate(jobs)]  # fmt: skip


@dataclass
class Run:
    """One job as the scheduler ran it."""

    job: Job
    gpus: tuple[int, ...] = ()
    workloads: list[Workload] = field(default_factory=list)
    started_h: float | None = None
    ended_h: float | None = None


class Scheduler:
    """FIFO, one job per GPU; a job holds its GPUs until every process of it has exited."""

    def __init__(self, stack: Stack, jobs: Sequence[Job], gpus: int, scale: float) -> None:
        self.stack, self.gpus, self.scale = stack, gpus, scale
        self.runs = [Run(job) for job in jobs]
        self.queue: list[Run] = []
        self.t0 = time.monotonic()

    def now_h(self) -> float:
        return (time.monotonic() - self.t0) / self.scale / 3600

    def busy_gpus(self) -> set[int]:
        return {g for r in self.runs if r.started_h is not None and r.ended_h is None
                for g in r.gpus}  # fmt: skip

    def tick(self) -> None:
        now = self.now_h()
        for run in self.runs:
            running = run.started_h is not None and run.ended_h is None
            if running and not any(w.alive() for w in run.workloads):
                run.ended_h = now
        arrived = {id(r) for r in self.queue}
        self.queue += [r for r in self.runs if r.started_h is None and id(r) not in arrived
                       and r.job.arrival_h <= now]  # fmt: skip
        while self.queue:
            free = [g for g in range(self.gpus) if g not in self.busy_gpus()]
            head = self.queue[0]
            if len(free) < head.job.gpus:
                break  # strict FIFO: the head waits, so does everyone behind it
            self.queue.pop(0)
            self.start(head, tuple(free[: head.job.gpus]), now)

    def start(self, run: Run, gpus: tuple[int, ...], now: float) -> None:
        job = run.job
        run.gpus, run.started_h = gpus, now
        for rank, gpu in enumerate(gpus):
            run.workloads.append(self.stack.spawn(
                f"job {job.id} {job.kind} rank {rank}", phases=job.phases(self.scale),
                gpu=gpu, memory=f"{job.memory_gib}GiB", name="python",
                heartbeat=job.kind in ("training", "hung"),
                children=2 if job.kind == "crashed" else 0, wait=False,
            ))  # fmt: skip

    def run_until(self, hours: float, progress: Callable[[float], None]) -> None:
        last = -1
        while (now := self.now_h()) < hours:
            self.tick()
            if int(now) != last:
                last = int(now)
                progress(now)
            time.sleep(0.1)
        self.tick()


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
    reclaimed: int
    harmed: int  # finishing jobs the actuator signalled: must be 0

    @property
    def jobs_per_gpu_day(self) -> float:
        return self.completed / self.gpus * 24 / self.hours

    @property
    def gpu_hours_per_job(self) -> float | None:
        return self.gpus * self.hours / self.completed if self.completed else None


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
    cases = stack.actuator_api("/api/v1/cases", limit=1000)["cases"]
    signalled = {"terminating", "killing", "reclaimed", "failed"}
    finishing_pids = {w.pid for r in runs if r.job.finishes for w in r.workloads}
    harmed = sum(1 for c in cases
                 if c["target"]["pid"] in finishing_pids and c["state"] in signalled)  # fmt: skip
    reclaimed = sum(1 for c in cases if c["state"] == "reclaimed")
    waits = [r.started_h - r.job.arrival_h for r in runs if r.started_h is not None]
    all_waits = waits + [hours - r.job.arrival_h for r in runs
                         if r.started_h is None and r.job.arrival_h < hours]  # fmt: skip
    return DayFigures(
        mode=mode, hours=hours, gpus=scheduler.gpus,
        utilisation=float(util[0]["value"][1]) if util else None,
        completed=sum(1 for r in runs if r.job.finishes and r.ended_h is not None),
        started=len(waits),
        waiting_at_end=sum(1 for r in runs if r.started_h is None and r.job.arrival_h < hours),
        mean_wait_h=statistics.fmean(waits) if waits else None,
        mean_wait_all_h=statistics.fmean(all_waits) if all_waits else None,
        idle_gpu_hours=idle_hours, reclaimed=reclaimed, harmed=harmed,
    )  # fmt: skip


def run_day(
    options: StackOptions, jobs: Sequence[Job], hours: float, mode: str,
    progress: Callable[[str], None] = lambda _: None,
) -> DayFigures:  # fmt: skip
    """One compressed day with the actuator in `mode` (observe or enforce)."""
    from dataclasses import replace

    from actuator.demo.stack import Stack

    policy = {**options.policy, "mode": mode}
    options = replace(options, policy=policy, label=f"day-{mode}")
    with Stack(options) as stack:
        stack.wait_scraped()
        progress(f"{mode}: stack up in {stack.run_dir}")
        scheduler = Scheduler(stack, jobs, options.gpus, options.scale)
        scheduler.run_until(hours, lambda h: progress(
            f"{mode}: hour {h:4.1f} of {hours:g}, {len(scheduler.queue)} queued, "
            f"{len(scheduler.busy_gpus())}/{options.gpus} GPUs allocated"))  # fmt: skip
        figures = measure(stack, scheduler, mode, hours)
        record = stack.run_dir / "day-jobs.json"
        record.write_text(json.dumps([
            {"id": r.job.id, "kind": r.job.kind, "arrival_h": round(r.job.arrival_h, 3),
             "gpus": list(r.gpus), "started_h": r.started_h, "ended_h": r.ended_h,
             "pids": [w.pid for w in r.workloads]} for r in scheduler.runs
        ], indent=1))  # fmt: skip
    progress(f"{mode}: done; Prometheus data kept in {stack.run_dir / 'prometheus-data'}")
    return figures


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f} %"


def _num(x: float | None, unit: str = "", digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}{unit}"


def table(before: DayFigures, after: DayFigures, seed: int, scale: float) -> str:
    """The brief's before/after table, as Markdown."""

    def change(a: float | None, b: float | None, *, points: bool = False) -> str:
        if a is None or b is None:
            return "-"
        if points:
            return f"{100 * (b - a):+.0f} pts"
        return f"x{b / a:.2f}" if a else "-"

    rows: list[tuple[str, str, str, str]] = [
        ("average GPU utilisation", _pct(before.utilisation), _pct(after.utilisation),
         change(before.utilisation, after.utilisation, points=True)),
        ("jobs completed per GPU per day", _num(before.jobs_per_gpu_day),
         _num(after.jobs_per_gpu_day), change(before.jobs_per_gpu_day, after.jobs_per_gpu_day)),
        ("GPU-hours per completed job (cost)", _num(before.gpu_hours_per_job, " h"),
         _num(after.gpu_hours_per_job, " h"),
         change(before.gpu_hours_per_job, after.gpu_hours_per_job)),
        ("mean queue wait (a job still waiting: until the end)",
         _num(before.mean_wait_all_h, " h"), _num(after.mean_wait_all_h, " h"),
         change(before.mean_wait_all_h, after.mean_wait_all_h)),
        ("mean queue wait of the jobs that started", _num(before.mean_wait_h, " h"),
         _num(after.mean_wait_h, " h"), change(before.mean_wait_h, after.mean_wait_h)),
        ("jobs still waiting at the end", str(before.waiting_at_end), str(after.waiting_at_end),
         "-"),
        ("GPU-hours held by idle or stalled processes", _num(before.idle_gpu_hours, " h"),
         _num(after.idle_gpu_hours, " h"), change(before.idle_gpu_hours, after.idle_gpu_hours)),
        ("processes reclaimed", str(before.reclaimed), str(after.reclaimed), "-"),
        ("working jobs signalled (must be 0)", str(before.harmed), str(after.harmed), "-"),
    ]  # fmt: skip
    lines = [
        f"Simulated day: {before.hours:g} h on {before.gpus} GPUs, seed {seed}, time x{scale:g} "
        f"(1 h = {3600 * scale:g} s)",
        "",
        "| | observe (nothing reclaimed) | enforce | change |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows],
        "",
        CAVEAT,
    ]
    return "\n".join(lines) + "\n"


def run_both(options: StackOptions, seed: int, hours: float, out: TextIO,
             progress: Callable[[str], None]) -> tuple[DayFigures, DayFigures]:  # fmt: skip
    jobs = plan_day(seed, hours=hours, gpus=options.gpus)
    kinds = {k: sum(1 for j in jobs if j.kind == k) for k in KINDS}
    progress(f"{len(jobs)} jobs: " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
    before = run_day(options, jobs, hours, "observe", progress)
    after = run_day(options, jobs, hours, "enforce", progress)
    out.write(table(before, after, seed, options.scale))
    return before, after


def as_dict(figures: DayFigures) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(figures) | {"jobs_per_gpu_day": figures.jobs_per_gpu_day,
                              "gpu_hours_per_job": figures.gpu_hours_per_job}  # fmt: skip
