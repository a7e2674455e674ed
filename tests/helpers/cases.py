"""Factories for cases, live re-checks and policies: the values decision tests start from."""

from __future__ import annotations

from typing import Any

from actuator.decisions import FleetState
from actuator.decisions import decide_live as _decide_live
from actuator.decisions import decide_signalled as _decide_signalled
from actuator.models import Case, LiveState, Member, State
from actuator.policy import Facts, Idle, Limits, Mode, Policy, resolve

T0 = 1_800_000_000.0
TICKS = 123_456
BOOT = "0b31359f-79be-4c80-b06e-652cb015d9d5"
IDLE = Idle(cpu_window=1.0, log_quiet_for=300.0)
LIMITS = Limits(terminations_per_node_per_hour=2, terminations_per_minute=1)


def make_case(**kw: Any) -> Case:
    base = dict(
        id=1,
        state=State.PENDING,
        version=0,
        node="n",
        pid=4242,
        start_time=T0 - 3600,
        uuid="GPU-0",
        start_ticks=TICKS,
        boot_id=BOOT,
        alertname="GpuProcessIdle",
        fingerprint="f",
        starts_ts=T0 - 60,
        labels={},
        annotations={},
        created=T0 - 1,
        updated=T0 - 1,
    )
    base.update(kw)
    return Case(**base)


def make_live(now: float = T0, **kw: Any) -> LiveState:
    base = dict(
        sampled_at=now,
        exists=True,
        start_ticks=TICKS,
        boot_id=BOOT,
        start_time=T0 - 3600,
        uid=1001,
        user="alice",
        gpu_found=True,
        on_gpu=True,
        gpu_memory_bytes=4 << 30,
        sm_util=0.0,
        cpu_seconds=10.0,
        members=(Member(4242, TICKS, 1001),),
    )
    if kw.get("listening_external") is not None:
        # a node that reads networks, and has watched this tree for two hours
        base.update(network_covered=True, network_watched_for=7200.0)
    base.update(kw)
    return LiveState(**base)


# What the suspend rung needs to know of a process (actuator/suspension.py): a driver that
# can checkpoint it, its 8 GiB footprint and room for it in host memory, no MPS on its GPU.
SUSPENDABLE: dict[str, Any] = dict(
    checkpoint_state="running",
    gpu_memory_bytes=8 * 1024**3,
    gpu_used_bytes=20 * 1024**3,
    host_memory_available=64 * 1024**3,
    mps_on_gpu=False,
)


def make_suspendable_live(now: float = T0, **over: Any) -> LiveState:
    """A live re-check the suspend rung accepts, changed by `over`."""
    return make_live(now, **{**SUSPENDABLE, **over})


def eff(mode: Mode = Mode.ENFORCE, **over):
    policy = Policy(mode=mode)
    base = resolve(policy, Facts(user="alice"))
    # Validated, not model_copy(update=): a test's "demand" becomes the enum it stands for.
    return type(base).model_validate({**base.model_dump(), **over})


GUARD = FleetState(unresolved=1)


def decide_live(case, live, e, idle, limits, guard, now, *args, mono=None, **kw):
    """Here the boot-time clock reads the same as the wall clock (tests step them apart)."""
    return _decide_live(
        case, live, e, idle, limits, guard, now, *args, mono=now if mono is None else mono, **kw
    )


def decide_signalled(case, alive, listed, e, now, mono=None):
    return _decide_signalled(case, alive, listed, e, now, mono=now if mono is None else mono)
