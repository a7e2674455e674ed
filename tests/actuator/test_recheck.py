"""When a warned case is re-checked live (actuator/recheck.py): every `every` seconds while
it waits out its grace, at every tick from its deadline on, at once when its demand changes,
and at every tick in any other state."""

from __future__ import annotations

import pytest

from actuator.demand import Request
from actuator.demand.fit import Choice, Verdict
from actuator.models import State
from actuator.policy import ReclaimWhen
from actuator.recheck import Checked, demand_key, recheck_due
from tests.helpers.cases import eff, make_case

EVERY = 5.0
WAITER = Request(source="wait", key="w1", who="carol", gpus=1)
CHOSEN = Choice(Verdict.CHOSEN, "carol waits", WAITER)
NOBODY = Choice(Verdict.NOT_NEEDED, "nobody waits")


def _warned(mono: float = 1000.0, when: ReclaimWhen = ReclaimWhen.IDLE, **kw):  # type: ignore[no-untyped-def]
    rule = eff(grace=600.0, reclaim_when=when)
    return make_case(state=State.NOTIFIED, notified_mono=mono, effective=rule.model_dump(), **kw)


def test_a_case_waiting_out_its_grace_is_rechecked_every_few_seconds() -> None:
    case = _warned()
    seen = Checked(1010.0, None)
    assert not recheck_due(case, seen, None, 1012.0, EVERY)
    assert recheck_due(case, seen, None, 1015.0, EVERY)  # `every` since the last look
    assert recheck_due(case, None, None, 1012.0, EVERY)  # never looked at by this worker


def test_its_deadline_is_never_waited_past() -> None:
    case = _warned(mono=1000.0)
    assert recheck_due(case, Checked(1599.0, None), None, 1600.0, EVERY)  # grace 600 s over
    extended = _warned(mono=1000.0, notice_extra_grace=100.0)
    assert not recheck_due(extended, Checked(1599.0, None), None, 1600.0, EVERY)
    assert recheck_due(extended, Checked(1699.0, None), None, 1700.0, EVERY)


@pytest.mark.parametrize(
    "state",
    [State.PENDING, State.TERMINATING, State.KILLING, State.SNOOZED, State.DEFERRED],
)
def test_every_other_state_is_rechecked_at_every_tick(state: State) -> None:
    case = _warned()
    case.state = state
    assert recheck_due(case, Checked(1010.0, None), None, 1010.5, EVERY)


def test_a_notice_to_retry_a_go_ahead_or_an_unreadable_rule_is_acted_on_at_once() -> None:
    unsent = _warned()
    unsent.notified_mono = None  # the notice was not delivered yet
    assert recheck_due(unsent, Checked(1010.0, None), None, 1010.5, EVERY)
    released = _warned(release_requested_mono=1010.2)
    assert recheck_due(released, Checked(1010.0, None), None, 1010.5, EVERY)
    for recorded in (None, {"grace": "not a duration"}, {"no_such_field": 1}):
        unreadable = _warned()
        unreadable.effective = recorded  # none, or written by another release
        assert recheck_due(unreadable, Checked(1010.0, None), None, 1010.5, EVERY)


def test_under_demand_a_change_in_who_waits_is_acted_on_at_once() -> None:
    case = _warned(when=ReclaimWhen.DEMAND)
    quiet = Checked(1010.0, demand_key(NOBODY))
    assert not recheck_due(case, quiet, NOBODY, 1011.0, EVERY)  # nobody waits: no deadline
    assert recheck_due(case, quiet, CHOSEN, 1011.0, EVERY)  # someone waits: the 2nd notice
    chosen = Checked(1010.0, demand_key(CHOSEN))
    assert recheck_due(case, chosen, None, 1011.0, EVERY)  # demand unknown now: held at once
    assert recheck_due(case, chosen, NOBODY, 1011.0, EVERY)  # demand went away


def test_under_demand_the_grace_runs_from_when_someone_started_waiting() -> None:
    case = _warned(when=ReclaimWhen.DEMAND, demand_mono=2000.0, demand_for=WAITER.ref)
    seen = Checked(2598.0, demand_key(CHOSEN))
    assert not recheck_due(case, seen, CHOSEN, 2599.0, EVERY)
    assert recheck_due(case, seen, CHOSEN, 2600.0, EVERY)


def test_a_new_case_waits_out_its_first_cpu_window_between_looks() -> None:
    opened = make_case(state=State.PENDING, cpu_seconds=5.0, cpu_at=1010.0, cpu_rate=None)
    seen = Checked(1010.1, None)
    assert not recheck_due(opened, seen, None, 1010.6, EVERY, cpu_window=1.0)  # half full
    assert recheck_due(opened, seen, None, 1011.1, EVERY, cpu_window=1.0)  # full: judged now
    assert recheck_due(opened, None, None, 1010.6, EVERY, cpu_window=1.0)  # another worker's
    # Its rate known (or no window opened yet), a pending case is looked at every tick.
    judged = make_case(state=State.PENDING, cpu_seconds=5.0, cpu_at=1010.0, cpu_rate=0.0)
    assert recheck_due(judged, seen, None, 1010.6, EVERY, cpu_window=1.0)
    unopened = make_case(state=State.PENDING)
    assert recheck_due(unopened, seen, None, 1010.6, EVERY, cpu_window=1.0)
