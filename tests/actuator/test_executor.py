"""Carrying out a committed decision (actuator/executor.py): one table from action to
effect, and observe mode's rehearsal of the very step enforcement would take. Fakes stand
behind the narrow Node and Scheduler interfaces and fail loudly on anything unexpected."""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path
from typing import Any

import pytest

from actuator.audit import AuditLog
from actuator.audit_records import KubeReclaim
from actuator.decisions import Action, Decision
from actuator.executor import Executor, Step
from actuator.ladder import Verb
from actuator.models import UNSET, Case, CaseUpdate, Reason, SignalResult, State
from actuator.notifications.notice import ProvenFacts
from actuator.notifications.notify import NullNotifier
from actuator.policy import Mode, Notice
from actuator.rehearsal import Rehearsal
from actuator.schedulers import Step as SchedulerStep
from actuator.store.signals import SignalSent
from tests.helpers.cases import T0, eff, make_case, make_live


class Node:
    name = "n"

    def __init__(self) -> None:
        self.signalled: list[tuple[str, bool]] = []

    def signal_tree(
        self, target: Any, members: Any, sig: signal.Signals, *, dry_run: bool, key: str
    ) -> list[SignalResult]:
        self.signalled.append((sig.name, dry_run))
        return [SignalResult(4242, sig.name, not dry_run, "ok")]

    def rehearse_many(self, rehearsals: list[Rehearsal]) -> list[list[SignalResult]]:
        for r in rehearsals:
            self.signalled.append((r.signal, True))
        return [[SignalResult(4242, r.signal, False, "dry run")] for r in rehearsals]

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected Node.{name}")


class Pods:
    """A scheduler that takes every case it is asked to claim (as pods do)."""

    hold = Reason.POD_BLOCKED

    def __init__(self) -> None:
        self.steps: list[tuple[bool, bool]] = []

    def claim(self, case: Case, live: Any) -> CaseUpdate:
        return CaseUpdate(pod={"namespace": "ml", "name": "yolo-0", "uid": "u", "action": "evict"})

    def owns(self, case: Case) -> bool:
        return case.pod is not None

    def reclaim(self, case: Case, verb: Verb, *, dry_run: bool = False) -> SchedulerStep:
        self.steps.append((verb == Verb.FORCE, dry_run))
        return SchedulerStep(
            "EVICT",
            True,
            "would evict pod ml/yolo-0" if dry_run else "ok",
            KubeReclaim(pod={"namespace": "ml", "name": "yolo-0"}, step="EVICT"),
        )

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected Scheduler.{name}")


@pytest.fixture
def executor(tmp_path: Path) -> Executor:
    return Executor(
        audit=AuditLog(tmp_path / "audit.jsonl"),
        notifier=NullNotifier(),
        gate=Notice(),
        clock=lambda: T0,
        mono=lambda: T0,
    )


def _step(decision: Decision, scheduler: Any = None, node: Node | None = None, **case: Any) -> Step:
    return Step(
        make_case(state=decision.state or State.PENDING, **case),
        decision,
        make_live(),
        eff(),
        node or Node(),
        scheduler,
        T0,
    )


def test_sigterm_goes_to_the_process_tree_or_through_the_scheduler_that_took_it(
    executor: Executor,
) -> None:
    node = Node()
    executor.carry_out(_step(Decision(Action.TERM, State.TERMINATING), node=node))
    assert node.signalled == [("SIGTERM", False)]

    pods, node = Pods(), Node()
    owned = {"pod": {"namespace": "ml", "name": "yolo-0", "uid": "u", "action": "evict"}}
    executor.carry_out(_step(Decision(Action.KILL, State.KILLING), pods, node, **owned))
    assert pods.steps == [(True, False)] and node.signalled == []  # never by PID


@pytest.mark.parametrize("mode", [Mode.OBSERVE, Mode.NOTIFY])
def test_observe_mode_rehearses_the_step_enforcement_would_take(
    executor: Executor, mode: Mode
) -> None:
    observed = Decision(Action.MOVE, State.OBSERVED)
    pods, node = Pods(), Node()
    step = _step(observed, pods, node)
    executor.carry_out(Step(step.case, observed, step.live, eff(mode), node, pods, T0))
    assert pods.steps == [(False, True)] and node.signalled == []  # the pod's eviction
    assert step.case.pod is None  # the claim was rehearsed on a copy

    node = Node()
    executor.carry_out(_step(observed, None, node))
    assert node.signalled == [("SIGTERM", True)]  # a bare process: its signal, dry


def test_what_was_done_comes_back_as_a_value_and_changes_no_case(executor: Executor) -> None:
    """Signals sent and reclaims counted are records of what was done, not decisions: the
    executor returns them (the node's batch commits them with its pass) and records
    nothing in the store itself."""
    term = _step(Decision(Action.TERM, State.TERMINATING), id=7)
    before = dataclasses.replace(term.case)
    done = executor.carry_out(term)
    assert done.sent == (SignalSent(7, 4242, "SIGTERM", T0),) and done.bumps == ()
    assert term.case == before  # nothing changed in place
    owned = {"pod": {"namespace": "ml", "name": "yolo-0", "uid": "u", "action": "evict"}}
    done = executor.carry_out(_step(Decision(Action.KILL, State.KILLING), Pods(), id=8, **owned))
    assert done.sent == (SignalSent(8, 4242, "EVICT", T0),)  # the scheduler's step, by name
    handed = {"demand_for": "wait:w1", "demand_who": "carol", "demand_at": T0 - 90.0}
    done = executor.carry_out(
        _step(Decision(Action.MOVE, State.RECLAIMED), id=9, exited_at=T0, **handed)
    )
    assert done.sent == () and ("reclaims", "demand", 1) in done.bumps
    assert ("demand_to_free_ms", "", 90000) in done.bumps
    assert ("demand_to_free_bucket", "120.0", 1) in done.bumps
    assert ("demand_to_free_bucket", "60.0", 1) not in done.bumps


class _RaisingNotifier:
    """A notifier that breaks its contract (raises instead of answering)."""

    def __init__(self) -> None:
        self.calls = 0

    def send(self, notice: Any, *, dry_run: bool) -> Any:
        self.calls += 1
        raise RuntimeError("directory lookup blew up")

    followup = send


def test_a_notifier_that_raises_gives_the_notice_an_undelivered_outcome(
    executor: Executor,
) -> None:
    """The attempt is counted and the retry scheduled, as for any undelivered notice: an
    escaped exception left the outcome unrecorded, and the next pass sent it again."""
    notifier = _RaisingNotifier()
    executor.notifier = notifier
    step = _step(Decision(Action.NOTIFY, State.NOTIFIED), id=11)
    assert step.live is not None
    step.case.facts = ProvenFacts.from_live(step.case, step.live).to_json()  # as apply() does
    noticed = executor.carry_out(step).update
    assert notifier.calls == 1
    assert noticed is not None  # the outcome, saved with the pass as any other
    assert noticed.notified_mono is UNSET  # no grace runs: nothing was delivered
    assert noticed.notice_attempts == 1
    assert noticed.next_notice_mono == T0 + executor.gate.retry_interval
    (record,) = [r for r in executor.audit.tail(10) if r["event"] == "notice"]
    assert record["delivered"] is False and "raised RuntimeError" in record["detail"]
    assert record["attempt"] == 1 and step.case.notice_attempts == 0  # the case: unchanged
