"""One frozen dataclass per audit event (actuator/audit_records.py): every event has its
record, each record's JSON keeps the log's shape, and the decision record reads back."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest

from actuator import audit_records
from actuator.audit import AuditLog, Event
from actuator.audit_records import NeedlessReclaim, Record, Snoozed
from actuator.decision_record import decision_record
from actuator.models import State
from tests.helpers.cases import T0, make_case


def _records() -> list[type[Record]]:
    return [
        c
        for _, c in inspect.getmembers(audit_records, inspect.isclass)
        if issubclass(c, Record) and c is not Record and "event" in vars(c)
    ]


def test_every_event_has_exactly_one_record() -> None:
    events = [c.event for c in _records()]
    assert sorted(events) == sorted(Event)  # none missing, none twice


def test_records_are_frozen() -> None:
    snooze = Snoozed(case=1, until=T0, duration=60.0, by="ops", reason="maintenance")
    with pytest.raises(dataclasses.FrozenInstanceError):
        snooze.reason = "other"  # type: ignore[misc]


def test_an_optional_field_is_left_out_while_none_a_stated_one_is_kept() -> None:
    needless = NeedlessReclaim(
        case=3, node="n", uuid="GPU-1", trigger="demand", request=None, holders=[], seconds=1.0
    )
    line = needless.to_json()
    assert line["event"] == Event.NEEDLESS_RECLAIM
    assert "why" not in line  # defaults to None: left out
    assert line["request"] is None  # may be None, always stated


def test_a_decision_record_is_written_with_the_logs_own_keys(tmp_path: Path) -> None:
    case = make_case(id=7, state=State.NOTIFIED)
    written = dataclasses.replace(
        decision_record(case, State.PENDING, "notify", "idle for 5m", T0, code="idle"),
        to="notified",
    )
    log = AuditLog(tmp_path / "audit.jsonl")
    log.write(written)
    (raw,) = log.tail(1)
    assert raw["from"] == "pending" and "live" not in raw  # the log's own keys
    assert {k: v for k, v in raw.items() if k != "ts"} == json.loads(json.dumps(written.to_json()))
