"""The simulated day's people (actuator/demo/accounts.py): jobs belong to several users in
several projects, without changing the seeded job mix; only root runs them as those
accounts, and only accounts that exist or that it was asked to create."""

from __future__ import annotations

from dataclasses import replace

import pytest

from actuator.demo import accounts
from actuator.demo.accounts import DAY_USERS, day_accounts, exists, owner_of
from actuator.demo.day import plan_day


def test_the_days_jobs_belong_to_several_users_in_several_projects() -> None:
    day = plan_day(1, gpus=4)
    owners = {j.user for j in day}
    assert owners <= set(DAY_USERS) and len(owners) == len(DAY_USERS)
    assert len({DAY_USERS[u] for u in owners}) >= 3
    assert [j.user for j in day] == [owner_of(j.id, 1) for j in day]
    # Owners are drawn apart from the mix: the same jobs as with no owners at all.
    assert [replace(j, user="") for j in day] == [replace(j, user="") for j in plan_day(1, gpus=4)]


def test_only_root_runs_jobs_as_the_days_accounts(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = day_accounts(create_missing=True, euid=1000)
    assert refused.users == {} and refused.note.startswith("not root")
    monkeypatch.setattr(accounts, "DAY_USERS", {"day-never-made": "p", "root": "q"})
    missing = day_accounts(create_missing=False, euid=0)  # nothing is created unless asked
    assert missing.users == {} and "no accounts day-never-made (--create-users" in missing.note
    assert not exists("day-never-made")
    monkeypatch.setattr(accounts, "DAY_USERS", {"root": "q"})
    assert day_accounts(create_missing=False, euid=0).users == {"root": "q"}
