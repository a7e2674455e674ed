"""How the demo judges each workload (actuator/demo/cast.py): only what cannot be undone is a
failure (a signal to a process that must be left alone, an exit that was not a reclaim);
anything else still open is "not yet", since compressed time can reopen a case."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actuator.demo.cast import DEMO_CAST, Expect, Role, judge
from actuator.demo.observe import Snapshot
from actuator.demo.procs import Managed
from actuator.demo.stack import Workload

GIB = 1 << 30


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Workload]:
    managed = Managed("sleeper", ["sleep", "60"], tmp_path / "sleep.log").start()
    yield Workload("w", "python", 0, "GPU-0", GIB, "idle", managed)
    managed.kill()


@pytest.fixture
def exited(tmp_path: Path) -> Workload:
    managed = Managed("done", ["true"], tmp_path / "true.log").start()
    assert managed.process is not None and managed.process.wait(10) == 0
    return Workload("w", "python", 0, "GPU-0", GIB, "idle", managed)


def _snapshot(pid: int, state: str, *signals: str, code: str = "", **case: Any) -> Snapshot:
    row = {"id": 1, "target": {"pid": pid}, "state": state, "reason": "why", "reason_code": code}
    sent = [{"signal": s, "ts": n} for n, s in enumerate(signals)]
    return Snapshot(at=0.0, cases=[row | case], signals={1: sent})


def _role(expect: Expect) -> Role:
    return Role("w", expect, "idle", "a test")


def test_a_reclaim_is_done_once_the_process_has_gone(running: Workload, exited: Workload) -> None:
    role = _role(Expect.RECLAIMED)
    done = judge(role, exited, _snapshot(exited.pid, "reclaimed", "SIGTERM", freed_bytes=GIB))
    assert (done.done, done.failed, done.status) == (True, None, "reclaimed, 1.0 GiB freed")
    # Reclaimed in the store while the process still lives: not yet.
    pending = judge(role, running, _snapshot(running.pid, "reclaimed", "SIGTERM", freed_bytes=0))
    assert (pending.done, pending.failed) == (False, None)
    # Cancelled or with no case yet, alive: a new episode may still open. Not a failure.
    for state in ("cancelled", "notified"):
        verdict = judge(role, running, _snapshot(running.pid, state))
        assert (verdict.done, verdict.failed) == (False, None), state


def test_an_exit_that_was_not_a_reclaim_and_a_failed_case_are_failures(
    running: Workload, exited: Workload
) -> None:
    role = _role(Expect.RECLAIMED)
    gone = judge(role, exited, Snapshot(at=0.0))
    assert gone.failed == "exited without being reclaimed (exited)"
    assert judge(role, running, _snapshot(running.pid, "failed")).failed == "case failed: why"
    # Exited while being terminated: the reclaim is under way, not a failure.
    assert judge(role, exited, _snapshot(exited.pid, "terminating", "SIGTERM")).failed is None


def test_a_job_that_needed_sigkill_must_have_had_it(exited: Workload) -> None:
    role = _role(Expect.KILLED)
    soft = judge(role, exited, _snapshot(exited.pid, "reclaimed", "SIGTERM", freed_bytes=GIB))
    assert soft.failed == "ended without SIGKILL"
    hard = _snapshot(exited.pid, "reclaimed", "SIGTERM", "SIGKILL", freed_bytes=GIB)
    assert judge(role, exited, hard).status == "reclaimed, 1.0 GiB freed (SIGKILL)"


@pytest.mark.parametrize("expect", [Expect.PROTECTED, Expect.UNTOUCHED, Expect.CANCELLED])
def test_a_signal_to_one_that_must_be_left_alone_fails_at_once(
    expect: Expect, running: Workload, exited: Workload
) -> None:
    role = _role(expect)
    signalled = judge(role, running, _snapshot(running.pid, "cancelled", "SIGTERM"))
    assert signalled.failed == "was signalled (SIGTERM)"
    # A case that reached a signalling state counts, even before a signal is recorded.
    assert judge(role, running, _snapshot(running.pid, "terminating")).failed is not None
    assert judge(role, exited, Snapshot(at=0.0)).failed == "exited"


def test_protected_and_cancelled_are_done_only_for_the_right_reason(running: Workload) -> None:
    protected = _role(Expect.PROTECTED)
    refused = _snapshot(running.pid, "refused", code="protected")
    assert judge(protected, running, refused).done
    assert not judge(protected, running, _snapshot(running.pid, "refused", code="busy")).done
    cancelled = judge(_role(Expect.CANCELLED), running, _snapshot(running.pid, "cancelled"))
    assert (cancelled.done, cancelled.status) == (True, "cancelled: why")
    assert judge(_role(Expect.UNTOUCHED), running, Snapshot(at=0.0)).status == "untouched"


def test_the_cast_has_one_of_each_outcome_but_cancelled() -> None:
    """The demo's workloads cover every outcome it shows (cancelled is the loop tests')."""
    assert {r.expect for r in DEMO_CAST} == set(Expect) - {Expect.CANCELLED}
    assert len({r.label for r in DEMO_CAST}) == len(DEMO_CAST)
