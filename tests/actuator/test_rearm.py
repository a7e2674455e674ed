"""A re-armed case keeps its process and alert and starts fresh otherwise (actuator/rearm.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from actuator.models import Case, Member, Reason, State
from actuator.rearm import KEPT_ON_REARM, rearmed_case
from tests.helpers.cases import T0, make_case

# What the re-armed case sets itself (a fresh case's bookkeeping).
SET_BY_REARM = {"state", "version", "created", "updated", "created_mono", "clock", "reason"}
SET_BY_REARM |= {"reason_code", "rearmed_from", "id"}


def not_default(field: dataclasses.Field[Any], value: Any) -> Any:
    """A value no fresh case has for the field."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        return value + "-old"
    if isinstance(value, list):
        return [Member(1, 2, 3)]
    if isinstance(value, dict):
        return {"old": "yes"}
    return {  # None by default: a value of the field's type
        "int | None": 7,
        "float | None": 7.5,
        "str | None": "old",
    }.get(str(field.type), {"old": "yes"})


@pytest.mark.reliability(62)
def test_every_field_not_kept_starts_fresh() -> None:
    """The class of defect 7: any field of Case, present or added later, that is not on the
    allow-list comes back at its default on the re-armed case."""
    old = make_case(state=State.CANCELLED, reason_code=Reason.ACTIVITY)
    fresh = make_case()
    for field in dataclasses.fields(Case):
        setattr(old, field.name, not_default(field, getattr(fresh, field.name)))
    new = rearmed_case(old, now=T0, mono=5.0, clock="c", window=300.0)
    for field in dataclasses.fields(Case):
        value = getattr(new, field.name)
        if field.name in KEPT_ON_REARM:
            assert value == getattr(old, field.name), field.name
        elif field.name not in SET_BY_REARM:
            default = (
                field.default_factory()  # type: ignore[misc]
                if field.default_factory is not dataclasses.MISSING
                else field.default
            )
            assert value == default, f"{field.name} carried over to the re-armed case"
    assert new.release_requested_mono is None
    assert (new.state, new.rearmed_from, new.created) == (State.PENDING, old.id, T0)
