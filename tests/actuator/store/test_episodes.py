"""Alert episodes, on each backend: one row per (fingerprint, startsAt) however often and
in whatever order Alertmanager delivers it; `resolved` is sticky and hands the episode back
for processing; repeated deliveries are reported for the audit; episodes become cases in
one transaction that the audit can still veto."""

from __future__ import annotations

from typing import Any

import pytest

from actuator.models import AlertmanagerAlert
from actuator.store import Store, open_store
from tests.helpers.api import alert, body
from tests.helpers.cases import make_case


def _alerts(*alerts: dict[str, Any]) -> list[AlertmanagerAlert]:
    return [AlertmanagerAlert.model_validate(a) for a in body(*alerts)["alerts"]]


RESOLVED = {"status": "resolved", "endsAt": "2026-01-01T00:10:00Z"}


def firing(store: Store, case_id: int) -> int:
    """The case's episodes still firing, as a step's guard reads them."""
    facts = store.guard_facts(
        case_id, "n", node_since=0.0, fleet_since=0.0, clock="", keep=None, now=0.0
    )
    return facts.unresolved


def test_resolved_is_sticky_whatever_the_order(database: str) -> None:
    store = open_store(database)
    store.init()
    store.record_alerts(_alerts(alert(**RESOLVED)), 0, 1.0)
    store.record_alerts(_alerts(alert()), 0, 2.0)  # a late firing copy
    (episode,) = store.pending_episodes()
    assert episode.status == "resolved" and episode.ends_ts is not None


def test_a_resolution_after_processing_hands_the_episode_back(database: str) -> None:
    store = open_store(database)
    store.init()
    store.record_alerts(_alerts(alert()), 0, 1.0)
    (episode,) = store.pending_episodes()
    store.ingest_batch([(episode, None)], [])
    assert store.pending_episodes() == []
    store.record_alerts(_alerts(alert()), 0, 2.0)  # the same firing again: nothing new
    assert store.pending_episodes() == []
    store.record_alerts(_alerts(alert(**RESOLVED)), 0, 3.0)
    (again,) = store.pending_episodes()
    assert again.status == "resolved"


def test_repeated_deliveries_are_reported_with_their_count(database: str) -> None:
    store = open_store(database)
    store.init()
    first = store.record_alerts(_alerts(alert()), 2, 1.0)
    assert (first.received, first.recorded, first.rejected, first.duplicates) == (3, 1, 2, ())
    store.record_alerts(_alerts(alert()), 0, 2.0)
    third = store.record_alerts(_alerts(alert(), alert(fingerprint="new")), 0, 3.0)
    (duplicate,) = third.duplicates
    assert duplicate[0] == "abc123" and duplicate[2] == 3
    assert store.metric_snapshot()["alerts_rejected"] == 2


def test_cases_are_made_with_their_episodes_or_not_at_all(database: str) -> None:
    store = open_store(database)
    store.init()
    store.record_alerts(_alerts(alert(), alert(fingerprint="two")), 0, 1.0)
    one, two = sorted(store.pending_episodes(), key=lambda e: e.fingerprint)

    def audit_fails(cases: list[Any]) -> None:
        raise OSError("audit volume full")

    with pytest.raises(OSError):
        store.ingest_batch([], [(make_case(fingerprint="abc123"), one)], audit_fails)
    assert store.live_cases() == [] and len(store.pending_episodes()) == 2

    audited: list[int] = []
    store.ingest_batch(
        [(two, None)],
        [(make_case(fingerprint="abc123"), one)],
        lambda cases: audited.extend(c.id for c in cases),
    )
    (case,) = store.live_cases()
    assert audited == [case.id] and store.pending_episodes() == []
    assert firing(store, case.id) == 1  # its episode still fires
    store.record_alerts(_alerts(alert(**RESOLVED)), 0, 2.0)
    assert firing(store, case.id) == 0
