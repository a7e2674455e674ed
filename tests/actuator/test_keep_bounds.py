"""What an owner may keep (actuator/keep_bounds.py): the rule's bounds and the repeat step,
one judgement for every way of asking."""

from __future__ import annotations

import pytest

from actuator.keep_bounds import Allowance, keep_refusal, owner_allowance, recorded_rule
from tests.helpers.cases import eff, make_case


@pytest.mark.parametrize(
    "asked,seconds,note",
    [
        (None, 0.0, ""),
        ("90m", 5400.0, "GPU_RECLAIMER_KEEP=1h30m granted (10m to 8h)"),
        ("5m", 0.0, "GPU_RECLAIMER_KEEP=5m refused: rule defaults allows 10m to 8h"),
        ("2d", 0.0, "GPU_RECLAIMER_KEEP=48h refused: rule defaults allows 10m to 8h"),
        ("forever", 0.0, "GPU_RECLAIMER_KEEP=forever is not a duration: ignored"),
        ("nan", 0.0, "GPU_RECLAIMER_KEEP=nan is not a duration: ignored"),
        ("\x1b[2J1h", 0.0, "GPU_RECLAIMER_KEEP=[2J1h is not a duration: ignored"),
    ],
)
def test_owner_allowance_bounds(asked, seconds, note):
    bounds = eff(keep_min=600.0, keep_max=8 * 3600.0)
    ask = None if asked is None else f"GPU_RECLAIMER_KEEP={asked}"
    assert owner_allowance(ask, bounds) == Allowance(seconds, note)


def test_a_keep_outside_the_rule_or_under_a_repeat_step_is_refused_with_why():
    rule = eff(keep_min=600.0, keep_max=3600.0)
    assert keep_refusal(rule, 1800.0) is None
    assert "for 10m to 1h, not 2h" in (keep_refusal(rule, 7200.0) or "")
    held = eff(keep_max=3600.0, keep_needs_sre=True, repeat_prior=4)
    assert "after 4 reclaims of your jobs" in (keep_refusal(held, 1800.0) or "")


def test_the_recorded_rule_is_the_one_a_case_was_judged_by():
    assert recorded_rule(make_case()) is None  # before its first decision
    rule = eff(keep_max=3600.0)
    assert recorded_rule(make_case(effective=rule.model_dump())) == rule
    assert recorded_rule(make_case(effective={"grace": "soon"})) is None  # another version's
