"""The suspend rung's decisions (pure): whether a process may be suspended, whether the
node has proven its checkpoint, and what a suspended case does next: its owner's resume,
its suspend_max, the node's memory. Nothing here signals; the ladder's next rung does.
"""

from __future__ import annotations

from actuator.decision import Decision, move, wait
from actuator.ladder import Action, rung_of
from actuator.models import Case, CaseUpdate, LiveState, Reason, State
from actuator.policy import Effective
from exporter.units import format_duration, format_size

SUSPENSION_STATES = frozenset({State.SUSPENDING, State.SUSPENDED, State.RESUMING})
HOST_MARGIN = 1.1  # host memory a checkpoint needs, as a multiple of the GPU footprint
FREED_SHARE = 0.9  # the GPU's used memory must drop by this share of the footprint
RESTORE_ATTEMPTS = 5  # restores the driver refused; then the ladder goes on, its owner told


def why_not_suspended(case: Case, live: LiveState, eff: Effective) -> str | None:
    """Why the suspend rung is skipped for this process (None: it is eligible)."""
    if not eff.suspend:
        return "suspend is off for this rule"
    if live.checkpoint_state != "running":
        state = live.checkpoint_state or "unknown"
        return f"the node cannot checkpoint it (driver state {state})"
    if case.uuid.startswith("MIG-"):
        return "a MIG instance (the driver cannot checkpoint it)"
    if live.mps_on_gpu is not False:
        return (
            "an MPS server runs on its GPU (the driver cannot checkpoint MPS clients)"
            if live.mps_on_gpu
            else "whether MPS runs on its GPU is unknown"
        )
    if live.slurm_job or live.pod_uid:
        return "a Slurm job or a pod: its scheduler keeps its own account of it"
    if live.listening_rendezvous:
        return "a rank of a multi-process job (NCCL cannot be checkpointed)"
    footprint = live.gpu_memory_bytes
    if not footprint or live.gpu_used_bytes is None:
        return "its GPU footprint is unknown"
    room = live.host_memory_available
    if room is None or room < HOST_MARGIN * footprint + eff.suspend_host_reserve:
        shown = "unknown" if room is None else format_size(room)
        return (
            f"host memory {shown} (the host's or its memory cgroup's, the tighter) is short "
            f"of {HOST_MARGIN:g}x its {format_size(footprint)} "
            f"plus the {format_size(eff.suspend_host_reserve)} reserve"
        )
    return None


def checkpoint_unproven(case: Case, live: LiveState) -> str | None:
    """What the node has not proven of the checkpoint yet (None: all of it): the driver's
    state, the PID off the GPU, the GPU's memory down by most of the footprint."""
    if live.checkpoint_state != "checkpointed":
        return f"the driver says {live.checkpoint_state or 'nothing'}"
    if live.on_gpu is not False:
        return "NVML still lists it" if live.on_gpu else "NVML cannot tell"
    before, now = case.gpu_used_before, live.gpu_used_bytes
    footprint = case.gpu_memory_bytes or 0
    if before is None or now is None or before - now < FREED_SHARE * footprint:
        return "the GPU's used memory has not dropped by its footprint"
    return None


def decide_suspension(
    case: Case, live: LiveState, eff: Effective, now: float, mono: float
) -> Decision:
    """A case on the suspend rung: proven or not, its owner's resume, its suspend_max, the
    node's memory. Its process is the same one or the case ends; nothing here signals
    except by the ladder's next rung."""
    if not live.exists or (live.start_ticks, live.boot_id) != (case.start_ticks, case.boot_id):
        return move(State.CANCELLED, Reason.PROCESS_EXITED, "the suspended process ended")
    term = rung_of(Action.TERM)
    started = case.suspend_mono if case.suspend_mono is not None else mono
    if case.state == State.SUSPENDING:
        unproven = checkpoint_unproven(case, live)
        if unproven is None:
            freed = case.gpu_memory_bytes or 0
            return move(
                State.SUSPENDED,
                Reason.SUSPENDED,
                f"checkpointed into host memory; {format_size(freed)} freed on {case.uuid}",
                suspended_mono=mono,
                freed_bytes=freed,
            )
        failed = live.checkpoint_state in ("running", "failed", "")
        if failed or mono >= started + eff.suspend_timeout:
            return Decision(
                term.action,
                term.state,
                Reason.NOT_SUSPENDED,
                f"not suspended ({unproven}): the ladder goes on",
            )
        return wait()
    if case.state == State.RESUMING:
        if live.checkpoint_state == "running" and live.on_gpu:
            keep = case.resume_keep
            return move(
                State.SNOOZED,
                Reason.RESUMED_AS_ASKED,
                f"restored onto GPU {live.gpu_index} and running; kept "
                f"{format_duration(keep)} as its owner asked",
                snoozed_until=now + keep,
                snoozed_until_mono=mono + keep,
                resume_requested_mono=None,
                restore_attempts=0,
                restore_waits=0,
                restore_room="",
            )
        if live.checkpoint_state == "checkpointed":
            retry = mono + eff.suspend_restore_retry
            if case.restore_room:  # not tried: no GPU had room. First in line for it
                return move(
                    State.SUSPENDED,
                    Reason.RESTORE_WAITING,
                    f"{case.restore_room}: still suspended, first in line for the room; "
                    f"looked at again in {format_duration(eff.suspend_restore_retry)}",
                    restore_waits=case.restore_waits + 1,
                    resume_requested_mono=retry,
                )
            tries = case.restore_attempts + 1  # the driver refused it
            if tries >= RESTORE_ATTEMPTS:
                return Decision(
                    term.action,
                    term.state,
                    Reason.RESTORE_FAILED,
                    f"the driver refused the restore {tries} times: the ladder goes on",
                    CaseUpdate(restore_attempts=tries),
                )
            return move(
                State.SUSPENDED,
                Reason.RESTORE_FAILED,
                f"the driver refused the restore: still suspended, tried again in "
                f"{format_duration(eff.suspend_restore_retry)} ({tries} of {RESTORE_ATTEMPTS})",
                restore_attempts=tries,
                resume_requested_mono=retry,
            )
        return wait()  # locked between restore and unlock, or a reading in between
    # Suspended, proven.
    if live.checkpoint_state != "checkpointed":
        return move(
            State.CANCELLED,
            Reason.ACTIVITY,
            f"it runs again (driver state {live.checkpoint_state or 'unknown'}): restored "
            "outside GPU Reclaimer",
        )
    suspend = rung_of(Action.SUSPEND)
    if mono >= started + eff.suspend_max:  # a restore waiting for room too: its bound
        return Decision(
            term.action,
            term.state,
            suspend.timeout_code,
            f"suspended for {format_duration(eff.suspend_max)}, never resumed: the ladder goes on",
        )
    if case.resume_requested_mono is not None and mono >= case.resume_requested_mono:
        asked = "its owner asked it back"
        return Decision(Action.RESUME, State.RESUMING, Reason.RESUME_ASKED, asked)
    room = live.host_memory_available
    if room is not None and room < eff.suspend_host_reserve:
        return Decision(
            term.action,
            term.state,
            Reason.HOST_MEMORY_SHORT,
            f"host memory is short ({format_size(room)} left): the ladder goes on",
        )
    return wait()
