"""The simulated day's people (actuator/demo/accounts.py): jobs belong to several users in
several projects, without changing the seeded job mix; only root runs them as those
accounts, and only accounts that exist or that it was asked to create."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from actuator.demo import accounts
from actuator.demo.accounts import DAY_USERS, day_accounts, exists, owner_of
from actuator.demo.day import plan_day
from actuator.demo.stack import Stack, StackError, StackOptions


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


def test_a_run_directory_the_accounts_cannot_reach_is_named(tmp_path: Path) -> None:
    """Jobs switch to the day's accounts once started: a run directory under a folder they
    cannot pass through is refused at start, naming it, not left to a workload's timeout."""
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    with pytest.raises(StackError, match="is closed to other users"):
        Stack(StackOptions(workdir=closed, users={"root": "ops"})).start()


def test_an_account_another_day_run_made_meanwhile_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two days started at once both find the accounts missing; the second useradd fails
    ("already exists"), and that run uses the account as the first does."""
    monkeypatch.setattr(accounts, "DAY_USERS", {"root": "q"})
    looks = iter([False, True])  # missing at the first look, there after useradd failed
    monkeypatch.setattr(accounts, "exists", lambda user: next(looks))
    monkeypatch.setattr(accounts, "create", lambda user: f"useradd: user '{user}' already exists")
    assert day_accounts(create_missing=True, euid=0).users == {"root": "q"}
    looks = iter([False, False])  # a failure that made nothing is still said
    failed = day_accounts(create_missing=True, euid=0)
    assert failed.users == {} and "cannot create root" in failed.note
