"""`gpu-reclaimer tune` against a real Prometheus holding a known history
(tests/helpers/history.py): each project's proposal, judged by what its flagged processes
did next, and the proposal as a diff of the rules."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actuator.tools.backtest import RuleSet
from actuator.tools.tune import Candidate, Verdict, propose
from tests.helpers.history import M, backfilled_history
from tests.helpers.prom import Server
from tests.support import gpu_reclaimer_command


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, int]]:
    with backfilled_history(tmp_path_factory.mktemp("tune")) as (prom, start):
        yield prom, start


# The history holds one process per project over two hours: enough for these tests, thinner
# than the defaults (10 processes, 24 h), which the tests of thin evidence keep.
SMALL_HISTORY = ("--min-processes", "1", "--min-history", "1h")


def tune(
    prom: Server, start: int, *args: str, until: int | None = None, needs=SMALL_HISTORY
) -> subprocess.CompletedProcess[str]:
    since, end = _iso(start), _iso(until if until is not None else start + 120 * M)
    command = [*gpu_reclaimer_command(), "tune", "--prometheus", prom.url, *needs]
    return subprocess.run(
        [*command, "--since", since, "--until", end, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(ts))


def _proposed(text: str, project: str) -> str:
    block = text.split(f"project {project}:", 1)[1].split("\nproject ", 1)[0]
    (line,) = [line for line in block.splitlines() if line.endswith("<- proposed")]
    return line


def test_each_project_gets_the_most_aggressive_rule_its_history_allows(
    backfilled: tuple[Server, int],
) -> None:
    """alice's job idled an hour (minutes 10-70): flagged rightly with any hold up to 20m,
    wrongly with 30m (it works again 29 minutes after that first firing). bob's idled at
    15 % SM: only a 20 % bar flags it. dave's idled 20 minutes and worked again: any hold
    that flags it is wrong, so his proposal flags nothing."""
    prom, start = backfilled
    done = tune(prom, start)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "util <= 0.2, for: 5m" in _proposed(out, "p-alice")
    assert "util <= 0.2, for: 5m" in _proposed(out, "p-bob")
    dave = _proposed(out, "p-dave")
    assert "for: 20m" in dave or "for: 30m" in dave, out
    assert "resumed soon after: dave's PID 400 on n1" in out
    assert "p-carol" not in out  # never idle: nothing to fit


def test_a_projects_proposal_is_a_diff_of_the_rules_and_can_be_written(
    backfilled: tuple[Server, int], tmp_path: Path
) -> None:
    prom, start = backfilled
    written = tmp_path / "bob.rules.yml"
    done = tune(prom, start, "--project", "p-bob", "--for", "5m", "--write", str(written))
    assert done.returncode == 0, done.stderr
    assert "-            gpu_process:sm_utilization_ratio:max_window <= 0.05" in done.stdout
    assert "+            gpu_process:sm_utilization_ratio:max_window <= 0.2" in done.stdout
    rules = RuleSet.load(written)
    assert "<= 0.2" in rules.records["gpu_process:quiet_condition"]
    assert rules.alerts["GpuProcessIdle"].hold_s == 300
    refused = tune(prom, start, "--write", str(written))
    assert refused.returncode == 2 and "--write needs --project" in refused.stderr


def test_a_candidate_that_flags_nothing_in_a_project_is_clean_there() -> None:
    cautious, eager = Candidate(0.02, 1800.0), Candidate(0.2, 300.0)
    wrong = Verdict(eager, flagged=1, wrongly=1)
    (proposal,) = propose([(cautious, {}), (eager, {"p": wrong})])
    assert proposal.best is not None and proposal.best.candidate == cautious
    assert proposal.verdicts[1] is wrong


@pytest.mark.reliability(61)
def test_defect_6_tune_without_evidence_proposes_nothing_and_exits_non_zero(
    backfilled: tuple[Server, int], tmp_path: Path
) -> None:
    """An empty period, an unknown project, minutes of history, or history thinner than the
    defaults: no proposal, no diff, nothing written, exit 3, saying what was found."""
    prom, start = backfilled
    written = tmp_path / "out.rules.yml"
    empty = tune(prom, start - 3 * 86400, until=start - 2 * 86400)
    assert empty.returncode == 3, empty.stderr
    assert "no evidence to fit" in empty.stderr and "<- proposed" not in empty.stdout
    unknown = tune(prom, start, "--project", "p-nobody", "--write", str(written))
    assert unknown.returncode == 3, unknown.stderr
    assert "0 GPU processes" in unknown.stdout and "nothing proposed" in unknown.stderr
    minutes = tune(
        prom, start, "--project", "p-alice", "--write", str(written), until=start + 15 * M
    )
    assert minutes.returncode == 3, minutes.stderr
    assert "not enough evidence" in minutes.stderr and "+++" not in minutes.stdout
    thin = tune(prom, start, "--project", "p-alice", "--write", str(written), needs=())
    assert thin.returncode == 3, thin.stderr
    assert "1 GPU process over 2h of history" in thin.stdout
    assert "at least 10 processes over 24h" in thin.stderr
    everyone = tune(prom, start, needs=())
    assert everyone.returncode == 3 and "<- proposed" not in everyone.stdout
    assert not written.exists()


@pytest.mark.reliability(61)
def test_no_proposal_where_no_candidate_flagged_anything() -> None:
    """Every candidate is clean where nothing was flagged: that is no evidence for the most
    aggressive one (defect 6)."""
    cautious, eager = Candidate(0.02, 1800.0), Candidate(0.2, 300.0)
    (proposal,) = propose([(cautious, {}), (eager, {})], projects=["p"])
    assert proposal.best is None and "nothing to fit" in proposal.refused
