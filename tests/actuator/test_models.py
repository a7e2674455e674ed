"""The typed values between modules: an alert's target parsed or refused with the reason
(never a guess), Alertmanager payloads split into valid and rejected alerts, and case
updates that change only what a decision set."""

from __future__ import annotations

import json

import pytest

from actuator.models import (
    UNSET,
    AlertmanagerPayload,
    CaseUpdate,
    Target,
    parse_decimal,
    parse_target,
    parse_uid_label,
    reject_duplicate_keys,
    split_alerts,
)
from tests.helpers.cases import make_case

BOOT = "0f8fad5b-d9cb-469f-a165-70867728950e"
LABELS = {
    "node": "gpu-07",
    "uuid": "GPU-5f2c1a3e-0000-4000-8000-000000000000",
    "pid": "4242",
    "start_ticks": "987654",
    "boot_id": BOOT,
}


def test_a_well_formed_alert_names_its_target() -> None:
    target = parse_target(LABELS, {"start_time": "1700000000.25"})
    assert target == Target(
        "gpu-07", 4242, 987654, BOOT, LABELS["uuid"], start_time=1_700_000_000.25
    )
    assert isinstance(target, Target) and target.key == (
        "gpu-07",
        BOOT,
        4242,
        987654,
        LABELS["uuid"],
    )
    # The annotations may carry what the labels do not (the rules put start_time there).
    moved = {k: v for k, v in LABELS.items() if k != "boot_id"}
    assert parse_target(moved, {"boot_id": BOOT}) == Target(
        "gpu-07", 4242, 987654, BOOT, LABELS["uuid"]
    )


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"node": ""}, "no valid node"),
        ({"node": "n" * 254}, "no valid node"),
        ({"uuid": "0"}, "no valid uuid"),
        ({"pid": "1"}, "no valid pid"),  # init is never a target
        ({"pid": "04242"}, "no valid pid"),  # a leading zero: not how the exporter writes it
        ({"pid": "4242 "}, "no valid pid"),
        ({"pid": "\uff14\uff12"}, "no valid pid"),  # fullwidth digits
        ({"pid": "4194304"}, "no valid pid"),  # past the kernel's limit
        ({"start_ticks": "0"}, "no valid start_ticks"),
        ({"boot_id": "not-a-boot-id"}, "no valid boot_id"),
    ],
)
def test_anything_else_is_refused_with_the_reason(change: dict[str, str], says: str) -> None:
    reason = parse_target({**LABELS, **change}, {})
    assert isinstance(reason, str) and says in reason


@pytest.mark.parametrize("start", ["soon", "nan", "inf", "-5", "0"])
def test_a_start_time_that_is_no_timestamp_is_refused(start: str) -> None:
    reason = parse_target(LABELS, {"start_time": start})
    assert isinstance(reason, str) and "start_time" in reason


def test_decimals_and_uids() -> None:
    assert parse_decimal("0", 0, 10) == 0 and parse_decimal("10", 0, 10) == 10
    assert parse_decimal("11", 0, 10) is None and parse_decimal("-1", -5, 5) is None
    assert parse_decimal("1e3", 0, 10_000) is None and parse_decimal(None, 0, 1) is None
    assert parse_uid_label(None) is None and parse_uid_label("") is None
    assert parse_uid_label("1001") == 1001
    assert isinstance(parse_uid_label("4294967295"), str)  # (uid_t)-1 is "no uid"


def test_a_payload_keeps_the_good_alerts_and_says_why_each_bad_one_was_rejected() -> None:
    good = {
        "status": "firing",
        "labels": {"alertname": "GpuProcessIdle", **LABELS},
        "annotations": {},
        "startsAt": "2026-12-02T10:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": "a1",
    }
    bad = {**good, "status": "maybe", "fingerprint": "b2"}
    payload = AlertmanagerPayload.model_validate(
        {"version": "4", "status": "firing", "receiver": "reclaim", "alerts": [good, bad]}
    )
    alerts, rejected = split_alerts(payload)
    assert [a.fingerprint for a in alerts] == ["a1"]
    assert [r.fingerprint for r in rejected] == ["b2"] and "status" in rejected[0].errors[0]


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate key 'status'"):
        json.loads(
            '{"status": "resolved", "status": "firing"}', object_pairs_hook=reject_duplicate_keys
        )


def test_a_case_update_changes_only_what_it_sets() -> None:
    case = make_case(notice_attempts=2, freed_bytes=0)
    first = CaseUpdate(notice_attempts=3)
    later = CaseUpdate(freed_bytes=2**30, notice_attempts=4)
    assert not CaseUpdate() and first and first.notice_extra_grace is UNSET
    combined = first.then(later)
    assert combined.changed() == {"notice_attempts": 4, "freed_bytes": 2**30}
    combined.apply_to(case)
    assert (case.notice_attempts, case.freed_bytes) == (4, 2**30)
    CaseUpdate(snoozed_until=None).apply_to(case)  # None is a value: it clears
    assert case.snoozed_until is None
