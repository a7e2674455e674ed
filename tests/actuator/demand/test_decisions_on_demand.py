"""reclaim_when: demand in the pure decision (actuator/decisions.py): the first notice keeps
the process; the grace starts only when a waiting request chose its GPU (with a second
notice); demand that goes away or becomes unknown stops the escalation; the live checks are
the same as ever."""

from __future__ import annotations

from dataclasses import replace

import pytest

from actuator.decisions import Action
from actuator.demand import Request
from actuator.demand.fit import Choice, Verdict
from actuator.models import State
from actuator.policy import Mode, ReclaimWhen
from tests.helpers.cases import GUARD, IDLE, LIMITS, T0, decide_live, eff, make_case, make_live

WAITER = Request(source="slurm", key="4711", who="Slurm job 4711 of bob", gpus=1)
CHOSEN = Choice(Verdict.CHOSEN, "chosen for Slurm job 4711 of bob waiting 9m; idle 47m", WAITER)
NOBODY = Choice(Verdict.NOT_NEEDED, "nobody is waiting")
UNKNOWN = Choice(Verdict.UNKNOWN, "demand unknown (slurm: timed out): held")
E = eff(grace=600.0, reclaim_when=ReclaimWhen.DEMAND)


def notified(**kw):
    base = dict(
        state=State.NOTIFIED,
        notified_at=T0 - 7200,
        notified_mono=T0 - 7200,
        cpu_seconds=10.0,
        cpu_at=T0 - 2,
        cpu_rate=0.0,
    )
    return make_case(**(base | kw))


def step(case, choice, now=T0, e=E, **live):
    guard = replace(GUARD, demand=choice)
    return decide_live(case, make_live(now, **live), e, IDLE, LIMITS, guard, now)


def test_idle_long_past_the_grace_is_kept_while_nobody_waits():
    for choice in (NOBODY, UNKNOWN, None):
        d = step(notified(), choice)
        assert d.action == Action.WAIT and not d.changes_state


def test_demand_starts_the_grace_with_a_second_notice():
    d = step(notified(), CHOSEN)
    assert d.action == Action.NOTIFY and d.state == State.NOTIFIED and d.code == "demand"
    assert d.reason == CHOSEN.reason
    assert d.updates.demand_for == "slurm:4711" and d.updates.demand_mono == T0
    waiting = notified(demand_for="slurm:4711", demand_who=WAITER.who, demand_at=T0, demand_mono=T0)
    assert step(waiting, CHOSEN, now=T0 + 599).action == Action.WAIT
    term = step(waiting, CHOSEN, now=T0 + 600)
    assert term.action == Action.TERM and term.code == "demand"
    assert "Slurm job 4711 of bob waits" in term.reason


@pytest.mark.reliability(51)
def test_demand_that_goes_away_stops_the_escalation_unknown_demand_holds_it():
    waiting = notified(demand_for="slurm:4711", demand_who=WAITER.who, demand_at=T0, demand_mono=T0)
    gone = step(waiting, NOBODY, now=T0 + 300)
    assert gone.state == State.NOTIFIED and gone.code == "demand_gone"
    assert gone.updates.demand_mono is None and gone.updates.demand_for is None
    # Past the deadline, but nobody can say whether the job still waits: held, not reset.
    for unknown in (UNKNOWN, None):
        held = step(waiting, unknown, now=T0 + 900)
        assert held.action == Action.WAIT and not held.changes_state
        assert not {"demand_for", "demand_mono"} & held.updates.changed().keys()  # not reset
    # Known again, the request still waits: the deadline it was told has passed.
    assert step(waiting, CHOSEN, now=T0 + 900).action == Action.TERM


@pytest.mark.reliability(52)
def test_demand_never_makes_a_working_process_reclaimable():
    waiting = notified(
        demand_for="slurm:4711", demand_who=WAITER.who, demand_at=T0 - 900, demand_mono=T0 - 900
    )
    busy = step(waiting, CHOSEN, sm_util=0.9)
    assert busy.state == State.CANCELLED and busy.code == "activity"
    reused = step(waiting, CHOSEN, start_ticks=1)
    assert reused.state == State.REFUSED


def test_observe_mode_under_demand_says_what_it_would_do():
    d = step(
        make_case(cpu_seconds=10.0, cpu_at=T0 - 2, cpu_rate=0.0),
        None,
        e=eff(Mode.OBSERVE, reclaim_when=ReclaimWhen.DEMAND),
    )
    assert d.state == State.OBSERVED and "after someone needs its GPU" in d.reason


def test_idle_mode_ignores_demand():
    d = step(notified(), NOBODY, e=eff(grace=600.0))
    assert d.action == Action.TERM and d.code == "idle"


def test_a_case_back_from_a_snooze_starts_over_with_a_first_notice():
    """A snooze ended: the old request's grace is forgotten, so demand later gives a new
    second notice and a full grace, never an instant SIGTERM."""
    back = make_case(
        state=State.PENDING,
        cpu_seconds=10.0,
        cpu_at=T0 - 2,
        cpu_rate=0.0,
        demand_for="slurm:4711",
        demand_who=WAITER.who,
        demand_at=T0 - 3600,
        demand_mono=T0 - 3600,
        snoozed_until=T0 - 1,
    )
    d = step(back, CHOSEN)
    assert d.action == Action.NOTIFY and d.code == "idle"
    assert d.updates.demand_mono is None and d.updates.demand_for is None
