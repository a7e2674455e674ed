"""Pure: a seeded run's workloads and faults. The same seed and length give the same plan.

Workloads arrive about one every `arrival` seconds (each start or exit is churn), drawn
from every kind a shared GPU server's day has. Times are seconds from the run's start and
already compressed: the run's rules and policy are scaled like the demo's (1/15), so a
`busy=2s` here is 30 s of a real job."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal, get_args

Kind = Literal[
    "busy",  # works until the end: never to be signalled
    "finished",  # works, then exits by itself
    "abandoned",  # works, then idles: to be reclaimed
    "resumes",  # idles a while, then works again: signalled only if it idled long enough
    "hung",  # a heartbeat that stops while util reads 100 %: stalled, to be reclaimed
    "stubborn",  # idles and ignores SIGTERM: reclaimed by SIGKILL
    "dataloader",  # idles with worker children: the whole tree is reclaimed
    "loading",  # loads a model (memory grows) for a long time, then works
    "cpu",  # its GPU idles but its process tree burns CPU: still working
    "protected",  # an idle TensorBoard: protected by command, never signalled
]
KINDS: tuple[Kind, ...] = get_args(Kind)
# Kinds the truth alone cannot tell from idle (the process reports "idle" but is not).
NEVER_IDLE: frozenset[Kind] = frozenset({"cpu"})
FaultKind = Literal[
    "kill_exporter",
    "kill_actuator",
    "kill_prometheus",
    "kill_alertmanager",
    "nvml_hang",
    "nvml_error",
    "nvml_no_process_util",
    "gpu_lost",
    "slow_clients",
    "hostile_requests",
    "forged_alert",
    "replayed_alert",
    "notice_channel_down",
    "audit_full",
    "restart_postgres",
    "kill_agent",
    "agent_hang",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)


@dataclass(frozen=True)
class WorkloadPlan:
    label: str
    kind: Kind
    start_at: float
    gpu: int
    phases: str
    name: str = ""
    heartbeat: bool = False
    ignore_sigterm: bool = False
    cpu: bool = False
    children: int = 0
    # Its stdout is a log file the exporter watches. The `cpu` kind has none: a process with
    # a log that stays quiet while it holds GPU memory is stalled by definition
    # (GpuProcessStalled: whatever its CPU does, as a spinning hang's does).
    log: bool = True
    # Which of the run's accounts it runs as (an index; drawn apart from the mix, so the
    # same seed gives the same jobs with or without accounts).
    owner: int = 0
    node: int = 0  # which simulated node (drawn apart from the mix, like the owner)


@dataclass(frozen=True)
class FaultPlan:
    at: float
    kind: FaultKind
    seconds: float  # how long it lasts (0: a one-off)
    gpu: int = 0
    service: str = ""  # the component a kill takes, when the run chose one (a replica)
    node: int = 0  # which simulated node a node's fault hits (drawn apart from the mix)


@dataclass(frozen=True)
class Plan:
    seed: int
    seconds: float
    workloads: tuple[WorkloadPlan, ...]
    faults: tuple[FaultPlan, ...]


def _phases(kind: Kind, rng: random.Random) -> str:
    def s(low: float, high: float) -> str:
        return f"{rng.uniform(low, high):.1f}s"

    life = s(30, 90)  # every job ends (churn), reclaimed or not
    return {
        "busy": f"busy={life},done",
        "finished": f"busy={s(5, 40)},done",
        "abandoned": f"busy={s(2, 10)},idle",
        "resumes": f"busy={s(2, 6)},idle={s(5, 45)},busy={life},done",
        "hung": f"busy={s(3, 10)},hang",
        "stubborn": f"busy={s(2, 8)},idle",
        "dataloader": f"busy={s(2, 8)},idle",
        "loading": f"load={s(20, 60)},busy={life},done",
        "cpu": f"idle={life},done",
        "protected": f"idle={life},done",
    }[kind]


def make_plan(
    seed: int,
    seconds: float,
    *,
    gpus: int = 2,
    arrival: float = 2.0,
    fault_every: float = 12.0,
    nodes: int = 1,
) -> Plan:
    """Workloads arrive until the last `settle` seconds (so the last can be judged); faults
    start after a quiet start and end before the settle time. Every kind of workload comes
    once before any repeats, and every kind of fault (in a seeded order)."""
    settle = min(40.0, 0.4 * seconds)
    quiet = min(20.0, 0.15 * seconds)
    rng = random.Random(seed)
    workloads = []
    t, n = 0.0, 0
    while t < max(0.0, seconds - settle):
        kind = KINDS[n % len(KINDS)] if n < len(KINDS) else rng.choice(KINDS)
        n += 1
        workloads.append(
            WorkloadPlan(
                label=f"{kind}-{n}",
                kind=kind,
                start_at=round(t, 2),
                gpu=rng.randrange(gpus),
                phases=_phases(kind, rng),
                name="tensorboard" if kind == "protected" else "",
                heartbeat=kind == "hung" or (kind == "busy" and rng.random() < 0.7),
                ignore_sigterm=kind == "stubborn",
                cpu=kind == "cpu",
                children=2 if kind == "dataloader" else 0,
                log=kind != "cpu",
                owner=random.Random(f"{seed}-owner-{n}").randrange(1 << 16),
                node=random.Random(f"{seed}-node-{n}").randrange(nodes),
            )
        )
        t += rng.expovariate(1.0 / arrival)
    faults: list[FaultPlan] = []
    order = list(FAULT_KINDS)
    rng.shuffle(order)
    t = quiet
    while t < max(0.0, seconds - settle):
        fault = order[len(faults)] if len(faults) < len(order) else rng.choice(FAULT_KINDS)
        once = fault.startswith("kill_") or fault.endswith("_alert")
        last = 0.0 if once else rng.uniform(3, 6)
        if fault == "audit_full":  # long enough that decisions fall into it
            last *= 3
        if fault == "restart_postgres":  # down this long, then started (recovery follows)
            last /= 2
        if fault == "agent_hang":  # past the actuator's 2 s call timeout, a few times
            last *= 2
        node = random.Random(f"{seed}-fault-node-{len(faults)}").randrange(nodes)
        faults.append(
            FaultPlan(round(t, 2), fault, round(last, 2), gpu=rng.randrange(gpus), node=node)
        )
        t += rng.uniform(0.5, 1.5) * fault_every
    return Plan(seed, seconds, tuple(workloads), tuple(faults))
