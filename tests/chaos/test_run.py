"""A short seeded chaos run in `make test`: the deployed shape on loopback (two simulated
nodes with an exporter and an agent each, Prometheus with the shipped rules, Alertmanager,
the actuator with notices required: two replicas on a PostgreSQL server of the run's own,
acting through the nodes' agents) under churn and a fault of each kind the time allows,
jobs under four accounts (as root), every signal judged against the simulated nodes'
ground truth and every notice by whom it reached: zero violations. The long run is
`make chaos` (docs/reliability.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers.prom import require_binary
from tests.support import gpu_reclaimer_command

pytestmark = pytest.mark.timeout(300)
SEED = 3


@pytest.mark.reliability(54)
def test_a_short_seeded_chaos_run_has_no_violation(tmp_path: Path) -> None:
    require_binary("prometheus")
    out = tmp_path / "report"
    # Jobs that run as the accounts reach the run directory through every folder above it:
    # one of its own under the temp dir (pytest's are closed to other users).
    workdir = Path(tempfile.mkdtemp(prefix="gpu-reclaimer-chaos-test-"))
    workdir.chmod(0o755)
    try:
        done = _chaos(out, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert (out / "chaos.json").exists(), done.stderr[-3000:]
    report = json.loads((out / "chaos.json").read_text())
    assert report["violations"] == [], (out / "chaos.md").read_text()
    assert done.returncode == 0, done.stderr[-3000:]
    # The run did what it says: signals judged, reclaims made, faults of several kinds.
    assert report["signals"] > 0 and report["reclaims"] > 0 and report["notices"] > 0, report
    assert len(report["faults"]) >= 5, report["faults"]
    assert "# Chaos run: seed 3" in (out / "chaos.md").read_text()


def _chaos(out: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *gpu_reclaimer_command(),
            "chaos",
            "--minutes",
            "1.4",
            "--seed",
            str(SEED),
            "--arrival",
            "2.5s",
            "--fault-every",
            "5s",
            "--out",
            str(out),
            "--workdir",
            str(workdir),
            "--create-users",  # as root (CI): the jobs run as four accounts
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
