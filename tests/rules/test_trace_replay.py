"""`benchmarks/trace_replay.py serving` on a small synthetic trace (reliability 66): the
shipped rules over services whose clients come minutes apart flag none of them as an idle
job, the figures the benchmark publishes for the public trace come from this same path;
and a client per request, too short for any scrape to see, leaves them judged as jobs:
what docs/metrics.md says is still invisible."""

from __future__ import annotations

import importlib.util
import re
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.support import REPO

_spec = importlib.util.spec_from_file_location(
    "trace_replay", REPO / "benchmarks" / "trace_replay.py"
)
assert _spec is not None and _spec.loader is not None
trace_replay = importlib.util.module_from_spec(_spec)
sys.modules["trace_replay"] = trace_replay  # its dataclasses look their module up
_spec.loader.exec_module(trace_replay)
SHIPPED = trace_replay.SHIPPED


def _trace(path: Path) -> Path:
    """100 minutes of requests about every 2 minutes, each brief (10 tokens back, 0.2 s on
    the GPU), none at a scrape's instant after the first."""
    start = datetime(2023, 11, 16, 18, 0, 0)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(50):
        at = start + timedelta(seconds=120.4 * i)
        rows.append(f"{at:%Y-%m-%d %H:%M:%S.%f}0,2000,10")
    path.write_text("\n".join(rows) + "\n")
    return path


def _firings(out: str, rules: str, alert: str) -> tuple[int, int]:
    """(firings, wrongful) from the benchmark's table row."""
    row = re.search(rf"^\| {rules} \| {alert} \| (\d+) \| \d+ \| (\d+) ", out, re.M)
    assert row, out
    return int(row.group(1)), int(row.group(2))


@pytest.mark.reliability(66)
@pytest.mark.timeout(300)
def test_services_with_clients_minutes_apart_are_never_idle_jobs(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    trace = _trace(tmp_path / "trace.csv")
    args = ["serving", str(trace), "--services", "3", "--before", str(SHIPPED)]
    assert trace_replay.main(args) == 0
    kept = capsys.readouterr().out
    assert _firings(kept, "after", "GpuProcessIdle") == (0, 0)
    assert trace_replay.main([*args, "--client-keepalive", "0"]) == 0
    per_request = capsys.readouterr().out
    firings, wrongful = _firings(per_request, "after", "GpuProcessIdle")
    assert wrongful > 0 and firings >= wrongful, per_request
