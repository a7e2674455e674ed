"""The simulated day's paused session on the real stack: enforcing, the session paused for
an hour (its owner at lunch) is killed in its pause and its owner redoes it, the first
half's work lost; with the suspend rung it is checkpointed instead and resumed by its
owner's keep, nothing lost. (Its own module: the suite's workers take a module whole, and
the day's two modules then run side by side.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from actuator.demo.day import Job, Scheduler, run_day, table
from actuator.demo.stack import StackOptions

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

SCALE = 1 / 240  # 1 simulated hour = 15 s

# A session paused for an hour (its owner at lunch), long past its alert and grace.
PAUSED = [Job(0, "paused", arrival_h=0.0, gpus=1, busy_h=0.4, memory_gib=16, pause_h=1.0)]
PAUSED_HOURS_AT_MOST = 12.0


def _paused_work_done(scheduler: Scheduler) -> bool:
    """The session (or, killed, its redo) has completed."""
    finishing = [r for r in scheduler.runs if r.job.kind in ("paused", "redo")]
    return any(r.ended_h is not None and r.job.kind == "redo" for r in finishing) or (
        finishing[0].resumed and finishing[0].ended_h is not None
    )


@pytest.mark.reliability(74)
def test_a_paused_session_is_suspended_and_resumed_where_killing_loses_its_work(
    system_tools: None, tmp_path: Path
) -> None:
    """Enforcing, the paused session is killed in its pause: its owner comes back, starts it
    again and the first half's work is lost. With the suspend rung it is checkpointed
    instead, its owner's keep brings it back, and it completes without losing anything."""
    options = StackOptions(
        workdir=tmp_path, scale=SCALE, gpus=1, grace=600 * SCALE, term_timeout=1.0, label="day"
    )
    killed = run_day(options, PAUSED, PAUSED_HOURS_AT_MOST, "enforce", stop_when=_paused_work_done)
    kept = run_day(options, PAUSED, PAUSED_HOURS_AT_MOST, "suspend", stop_when=_paused_work_done)
    report = table([killed, kept], seed=0, scale=SCALE)
    assert (killed.lost, killed.redone, killed.suspended) == (1, 1, 0), report
    assert killed.work_lost_gpu_h == pytest.approx(0.2), report  # the first half, on 1 GPU
    assert (kept.lost, kept.redone, kept.suspended, kept.resumed) == (0, 0, 1, 1), report
    assert kept.work_lost_gpu_h == 0 and kept.harmed == 0 and killed.harmed == 0, report
    assert kept.completed == killed.completed == 1, report
    assert kept.hours < killed.hours, report  # nothing to do again: it finished sooner
    assert kept.peak_host_gib == pytest.approx(16), report  # its 16 GiB, while suspended
