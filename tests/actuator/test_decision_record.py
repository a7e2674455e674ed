"""The one shape of a decision's audit record (actuator/decision_record.py)."""

from __future__ import annotations

from actuator.audit import Event
from actuator.decision_record import StepEvidence, decision_record
from actuator.models import State
from tests.helpers.cases import T0, make_case


def test_a_created_case_names_the_state_it_starts_in_a_step_the_state_it_left() -> None:
    case = make_case(id=7, state=State.NOTIFIED)
    created = decision_record(case, None, "created", "alert received", T0)
    step = decision_record(case, State.PENDING, "notify", "idle", T0, code="idle")
    assert created.event == Event.DECISION and created.case == 7
    assert (created.from_state, created.to) == (None, "notified")
    assert (step.from_state, step.to, step.code) == ("pending", None, "idle")
    assert created.decision_id != step.decision_id  # each decision its own id
    assert created.timings["episode_age"] == T0 - case.starts_ts
    assert decision_record(make_case(id=0), None, "x", "", T0).case is None
    line = step.to_json()  # the log's keys, as readers have always read them
    assert (line["event"], line["from"], line["code"]) == ("decision", "pending", "idle")
    assert "rearmed_from" not in line and "from_state" not in line


def test_a_steps_evidence_reads_back_and_a_part_of_the_wrong_type_reads_as_absent() -> None:
    """`why` reads the timeline through StepEvidence: what a step stored comes back whole;
    a creation's or a snooze's evidence is not a step's; a mangled part is absent, not a
    crash."""
    stored = StepEvidence("notify", "idle", "d1", {"sm_util": 0.0}, {"max_sm_util": 5})
    assert StepEvidence.from_json(stored.to_json()) == stored
    assert StepEvidence.from_json({"labels": {"pid": "7"}}) is None
    assert StepEvidence.from_json("not a dict") is None
    mangled = StepEvidence.from_json({"decision_id": "d2", "live": [1, 2], "thresholds": "x"})
    assert mangled is not None and mangled.live is None and mangled.thresholds is None
