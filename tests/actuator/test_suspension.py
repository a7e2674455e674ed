"""The suspend rung's decisions (actuator/suspension.py), pure: who is eligible and why not,
what the node must prove before a suspend counts, and a suspended case's next step. The
rung end to end on a real actuator: tests/actuator/test_suspend.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from actuator.ladder import Action
from actuator.models import Reason, State
from actuator.suspension import (
    RESTORE_ATTEMPTS,
    checkpoint_unproven,
    decide_suspension,
    why_not_suspended,
)
from tests.helpers.cases import T0, eff, make_case, make_live, make_suspendable_live

GiB = 1024**3
RULES = eff(suspend=True, suspend_host_reserve=GiB, suspend_max=3600.0, suspend_timeout=60.0)


@pytest.mark.parametrize(
    ("over", "rules", "why"),
    [
        ({}, eff(), "suspend is off"),
        ({"checkpoint_state": ""}, RULES, "cannot checkpoint it (driver state unknown)"),
        ({"checkpoint_state": "locked"}, RULES, "driver state locked"),
        ({"slurm_job": "42"}, RULES, "a Slurm job or a pod"),
        ({"pod_uid": "u-1"}, RULES, "a Slurm job or a pod"),
        ({"listening_rendezvous": 2}, RULES, "NCCL cannot be checkpointed"),
        ({"mps_on_gpu": True}, RULES, "an MPS server runs on its GPU"),
        ({"mps_on_gpu": None}, RULES, "whether MPS runs on its GPU is unknown"),
        ({"gpu_memory_bytes": None}, RULES, "footprint is unknown"),
        ({"host_memory_available": None}, RULES, "host memory unknown"),
        # 8 GiB x 1.1 + 1 GiB reserve = 9.8 GiB
        ({"host_memory_available": int(9.7 * GiB)}, RULES, "is short of 1.1x its 8.0 GiB"),
    ],
)
def test_who_is_not_suspended_and_why(over: dict, rules, why: str) -> None:
    said = why_not_suspended(make_case(), make_suspendable_live(**over), rules)
    assert said is not None and why in said


def test_an_eligible_process_and_a_mig_instance() -> None:
    assert why_not_suspended(make_case(), make_suspendable_live(), RULES) is None
    mig = make_case(uuid="MIG-4f1c")
    assert "MIG" in (why_not_suspended(mig, make_suspendable_live(), RULES) or "")


def _suspending(**over):
    base = dict(
        state=State.SUSPENDING, suspend_mono=T0, gpu_memory_bytes=8 * GiB, gpu_used_before=20 * GiB
    )
    return make_case(**{**base, **over})


def test_a_suspend_counts_only_with_every_proof() -> None:
    case = _suspending()
    proven = make_live(T0, checkpoint_state="checkpointed", on_gpu=False, gpu_used_bytes=12 * GiB)
    assert checkpoint_unproven(case, proven) is None
    for over, missing in (
        ({"checkpoint_state": "locked"}, "the driver says locked"),
        ({"on_gpu": True}, "NVML still lists it"),
        ({"on_gpu": None}, "NVML cannot tell"),
        ({"gpu_used_bytes": int(13 * GiB)}, "has not dropped"),  # down 7 of 8 GiB: < 90 %
        ({"gpu_used_bytes": None}, "has not dropped"),
    ):
        assert missing in (checkpoint_unproven(case, replace(proven, **over)) or "")
    d = decide_suspension(case, proven, RULES, T0, T0 + 1)
    assert (d.state, d.code, d.updates.freed_bytes) == (State.SUSPENDED, Reason.SUSPENDED, 8 * GiB)


def test_an_unproven_suspend_goes_on_to_sigterm_not_before_its_time() -> None:
    case = _suspending()
    copying = make_live(T0, checkpoint_state="locked", on_gpu=True, gpu_used_bytes=20 * GiB)
    assert decide_suspension(case, copying, RULES, T0, T0 + 59).action == Action.WAIT
    late = decide_suspension(case, copying, RULES, T0, T0 + 60)
    assert (late.action, late.code) == (Action.TERM, Reason.NOT_SUSPENDED)
    refused = replace(copying, checkpoint_state="running")  # unlocked after a failed call
    assert decide_suspension(case, refused, RULES, T0, T0 + 1).action == Action.TERM


def test_a_suspended_case_resumes_expires_runs_short_or_ends() -> None:
    suspended = _suspending(state=State.SUSPENDED)
    off = make_live(T0, checkpoint_state="checkpointed", on_gpu=False, host_memory_available=None)
    assert decide_suspension(suspended, off, RULES, T0, T0 + 10).action == Action.WAIT
    asked = replace(suspended, resume_requested_mono=T0 + 5)
    assert decide_suspension(asked, off, RULES, T0, T0 + 4).action == Action.WAIT  # not yet
    d = decide_suspension(asked, off, RULES, T0, T0 + 5)
    assert (d.action, d.state) == (Action.RESUME, State.RESUMING)
    expired = decide_suspension(suspended, off, RULES, T0, T0 + 3600)
    assert (expired.action, expired.code) == (Action.TERM, Reason.SUSPEND_EXPIRED)
    short = replace(off, host_memory_available=GiB - 1)
    assert decide_suspension(suspended, short, RULES, T0, T0 + 10).code == Reason.HOST_MEMORY_SHORT
    outside = replace(off, checkpoint_state="running")
    assert decide_suspension(suspended, outside, RULES, T0, T0 + 10).state == State.CANCELLED
    gone = make_live(T0, exists=False)
    assert decide_suspension(suspended, gone, RULES, T0, T0 + 10).code == Reason.PROCESS_EXITED


def test_a_refused_restore_is_retried_then_the_ladder_goes_on() -> None:
    resuming = _suspending(state=State.RESUMING, resume_keep=3600.0)
    still = make_live(T0, checkpoint_state="checkpointed", on_gpu=False)
    d = decide_suspension(resuming, still, RULES, T0, T0 + 1)
    assert (d.state, d.code) == (State.SUSPENDED, Reason.RESTORE_FAILED)
    assert d.updates.restore_attempts == 1 and d.updates.resume_requested_mono == T0 + 31
    sooner = RULES.model_copy(
        update={"suspend_restore_retry": 5.0}
    )  # the rule's retry, not a constant
    assert decide_suspension(resuming, still, sooner, T0, T0 + 1).updates.resume_requested_mono == (
        T0 + 6
    )
    last = replace(resuming, restore_attempts=RESTORE_ATTEMPTS - 1)
    end = decide_suspension(last, still, RULES, T0, T0 + 1)
    assert (end.action, end.code) == (Action.TERM, Reason.RESTORE_FAILED)
    back = make_live(T0, checkpoint_state="running", on_gpu=True, gpu_index=0)
    kept = decide_suspension(resuming, back, RULES, T0, T0 + 1)
    assert (kept.state, kept.code) == (State.SNOOZED, Reason.RESUMED_AS_ASKED)
    assert kept.updates.snoozed_until_mono == T0 + 1 + 3600


def test_a_resume_without_room_waits_first_in_line_and_is_not_a_refused_try() -> None:
    """No GPU had room: the node did not call the driver. That is a wait for room, bounded
    by suspend_max, never one of the refused tries that end in SIGTERM."""
    room = "no room on GPU 0: 2.0 GiB free, 8.0 GiB needed"
    waiting = _suspending(state=State.RESUMING, restore_room=room, restore_attempts=4)
    still = make_live(T0, checkpoint_state="checkpointed", on_gpu=False)
    d = decide_suspension(waiting, still, RULES, T0, T0 + 1)
    assert (d.action, d.state, d.code) == (Action.MOVE, State.SUSPENDED, Reason.RESTORE_WAITING)
    assert d.updates.restore_waits == 1 and d.updates.resume_requested_mono == T0 + 31
    assert "restore_attempts" not in d.updates.changed()  # 4 of 5 stays 4: no try counted
    assert room in d.reason and "first in line" in d.reason
    # Asked, waiting for room, and suspend_max is up: the bound wins over the next try.
    asked = _suspending(state=State.SUSPENDED, resume_requested_mono=T0 + 3000, restore_waits=9)
    off = make_live(T0, checkpoint_state="checkpointed", on_gpu=False)
    assert decide_suspension(asked, off, RULES, T0, T0 + 3599).action == Action.RESUME
    end = decide_suspension(asked, off, RULES, T0, T0 + 3600)
    assert (end.action, end.code) == (Action.TERM, Reason.SUSPEND_EXPIRED)
