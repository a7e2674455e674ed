"""The agent's journal of escalation steps: each step carried out at most once, across
retries, replays and restarts; a step interrupted mid-send is never sent again."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

from actuator.fleet.journal import IN_DOUBT, SignalJournal
from actuator.models import SignalResult

SENT = [SignalResult(4242, "SIGTERM", True), SignalResult(4243, "SIGTERM", False, "gone")]


def test_a_step_is_ours_once_and_then_answered_with_what_it_did(tmp_path: Path) -> None:
    journal = SignalJournal(tmp_path / "journal.db")
    assert journal.claim("case-7:term") is None  # ours: carry it out now
    journal.finish("case-7:term", SENT)
    assert journal.claim("case-7:term") == SENT  # a retry or a replay: what it did
    assert journal.claim("case-7:kill") is None  # another step of the same case is its own
    assert stat.S_IMODE(os.stat(tmp_path / "journal.db").st_mode) == 0o600


def test_a_step_interrupted_mid_send_is_in_doubt_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    # The agent claims the step, then dies before it records what it sent.
    child = multiprocessing.get_context("spawn").Process(target=_claim_and_die, args=(path,))
    child.start()
    child.join(30)
    assert child.exitcode == -9  # SIGKILL: nothing after the claim ran
    restarted = SignalJournal(path)
    (answer,) = restarted.claim("case-9:term") or []
    assert not answer.sent and answer.detail == IN_DOUBT  # never sent a second time


def test_old_steps_are_pruned_and_recent_ones_kept(tmp_path: Path) -> None:
    now = [1_000_000.0]
    journal = SignalJournal(tmp_path / "journal.db", clock=lambda: now[0])
    journal.claim("old")
    journal.finish("old", SENT)
    now[0] += 7200
    journal.claim("recent")
    journal.prune(older_than=3600)
    assert journal.claim("old") is None  # forgotten: a replay this late is a new step
    assert journal.claim("recent") == [SignalResult(0, "", False, IN_DOUBT)]


def _claim_and_die(path: Path) -> None:
    journal = SignalJournal(path)
    assert journal.claim("case-9:term") is None
    os.kill(os.getpid(), 9)
