"""The escalation ladder as data: its table in the docs, its invariants, and the readers
that must refuse what it does not hold."""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path

import pytest
from pydantic import ValidationError

from actuator import executor as executor_module
from actuator import ladder
from actuator.audit import AuditLog
from actuator.decisions import Decision
from actuator.executor import Executor, NoHandler
from actuator.fleet.wire import SignalRequest
from actuator.ladder import LADDER, SIGNALLED_STATES, Action, Rung, next_rung, rung_of
from actuator.models import Case, CaseUpdate, Member, Reason, State
from actuator.notifications.notify import NullNotifier
from actuator.policy import Effective, Notice
from tests.helpers.cases import T0, decide_signalled, eff, make_case

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_show_the_ladder_the_code_runs() -> None:
    docs = (ROOT / "docs" / "actuator.md").read_text()
    shown = docs.split("<!-- ladder:begin -->\n", 1)[1].split("\n<!-- ladder:end -->", 1)[0]
    assert shown == ladder.table(), (
        "docs/actuator.md's ladder is stale: paste `python -m actuator.ladder` between its "
        "ladder:begin and ladder:end markers"
    )


def test_every_rung_names_real_fields_and_its_chain_ends() -> None:
    case_fields = {f.name for f in dataclasses.fields(Case)}
    update_fields = {f.name for f in dataclasses.fields(CaseUpdate)}
    for rung in LADDER:
        assert rung.timeout in Effective.model_fields, rung
        if rung.stamps is not None:
            for name in (rung.stamps.wall, rung.stamps.mono):
                assert name in case_fields and name in update_fields, (rung, name)
    seen: set[Action] = set()
    rung: Rung | None = LADDER[0]
    while rung is not None:  # notify -> ... -> a rung with no next: no cycle, no dead end
        assert rung.action not in seen
        seen.add(rung.action)
        rung = next_rung(rung.action)
    assert seen == {r.action for r in LADDER}
    assert len({r.state for r in LADDER}) == len(LADDER)  # a state tells its rung


def test_signalled_states_are_the_rungs_with_a_signal_and_never_a_stop() -> None:
    assert {State.TERMINATING, State.KILLING} == SIGNALLED_STATES
    assert all(r.signal not in (signal.SIGSTOP, signal.SIGTSTP) for r in LADDER)
    # The rungs that take the tree are looked at last; only SIGTERM's is gated and limited.
    taking = [r for r in LADDER if r.takes_tree]
    assert [r.action for r in taking] == [Action.SUSPEND, Action.TERM]
    assert all(r.last_look for r in taking)
    assert [r.action for r in LADDER if r.gated or r.limited] == [Action.TERM]
    # The suspend rung sends no signal and is skipped where the process is not eligible.
    suspend = rung_of(Action.SUSPEND)
    assert suspend.optional and suspend.signal is None and suspend.then == Action.TERM


def test_the_agent_accepts_only_the_ladders_signals() -> None:
    body = {
        "key": "case-1",
        "target": {"node": "n", "pid": 5, "start_ticks": 1, "boot_id": "b", "uuid": "GPU-1"},
        "members": [],
    }
    for name in ("SIGTERM", "SIGKILL"):
        assert SignalRequest(**body, signal=name).signum.name == name
    for name in ("SIGSTOP", "SIGCONT", "SIGHUP", "SIGTERM\n"):
        with pytest.raises(ValidationError):
            SignalRequest(**body, signal=name)


def test_an_executor_without_a_handler_for_a_rung_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = dataclasses.replace(rung_of(Action.TERM), action=Action.MOVE, state=State.OBSERVED)
    monkeypatch.setattr(executor_module, "LADDER", (*LADDER, extra))
    with pytest.raises(NoHandler, match="move"):
        Executor(
            audit=AuditLog(tmp_path / "audit.jsonl"),
            notifier=NullNotifier(),
            gate=Notice(),
            clock=lambda: T0,
            mono=lambda: T0,
        )


def test_a_signalled_case_climbs_the_ladder_on_each_rungs_own_timeout() -> None:
    alive = [Member(4242, 1)]
    rules = eff(term_timeout=10, kill_timeout=7)
    terminating = make_case(state=State.TERMINATING, term_mono=T0)
    assert decide_signalled(terminating, alive, None, rules, now=T0, mono=T0 + 9.9) == Decision(
        Action.WAIT
    )
    up = decide_signalled(terminating, alive, None, rules, now=T0, mono=T0 + 10)
    assert (up.action, up.state, up.code) == (Action.KILL, State.KILLING, Reason.TERM_TIMEOUT)

    killing = make_case(state=State.KILLING, term_mono=T0, kill_mono=T0 + 10)
    assert decide_signalled(killing, alive, None, rules, now=T0, mono=T0 + 16.9).action == (
        Action.WAIT
    )
    end = decide_signalled(killing, alive, None, rules, now=T0, mono=T0 + 17)
    assert (end.state, end.code) == (State.FAILED, Reason.UNKILLABLE)
    # A rung whose moment was never recorded never times out on a guess.
    unstamped = make_case(state=State.TERMINATING, term_mono=None)
    assert decide_signalled(unstamped, alive, None, rules, now=T0, mono=T0 + 1e6).action == (
        Action.WAIT
    )
