"""The demo's screen (actuator/demo/view.py): one row per workload saying what each part
sees, columns that line up whatever the styling, and the audit's decisions in words."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from actuator.audit import Event
from actuator.demo.cast import Expect, Role, Verdict
from actuator.demo.observe import GpuMemory, Snapshot
from actuator.demo.procs import Managed
from actuator.demo.stack import Stack, Workload
from actuator.demo.view import COLUMNS, Style, render

GiB = 2**30
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def workload(tmp_path: Path) -> Iterator[Workload]:
    managed = Managed("idle", ["sleep", "60"], tmp_path / "idle.log").start()
    yield Workload("idle-notebook", "python nb.py", 0, "GPU-0", 4 * GiB, "idle:1h", managed)
    managed.stop()


def screen(stack: Stack, workload: Workload, snap: Snapshot, style: Style) -> list[str]:
    role = Role("idle-notebook", Expect.RECLAIMED, "idle:1h", "an abandoned notebook")
    verdict = Verdict(done=False, failed=None, status="waiting")
    return render(
        stack, [(role, workload)], snap, [verdict], started=snap.at - 42, style=style
    ).splitlines()


def test_a_notified_case_counts_down_and_the_columns_line_up_with_or_without_colour(
    workload: Workload,
) -> None:
    stack = Stack()
    now = 1_000_000.0
    snap = Snapshot(
        at=now,
        alerts=[
            {"labels": {"alertname": "GpuProcessIdle", "pid": str(workload.pid)}, "state": "firing"}
        ],
        cases=[
            {"id": 3, "state": "notified", "notified_at": now - 5, "target": {"pid": workload.pid}}
        ],
        gpus=[GpuMemory("0", 6 * GiB, 80 * GiB)],
        process_memory={workload.pid: 4 * GiB},
        nvml_up=True,
    )
    plain = screen(stack, workload, snap, Style(color=False))
    coloured = [ANSI.sub("", line) for line in screen(stack, workload, snap, Style(color=True))]
    assert plain == coloured  # styling takes no room on screen
    header, row = plain[2], plain[3]
    assert header.split() == [name for name, _ in COLUMNS]
    left = stack.options.grace - 5
    assert f"#3 notified, SIGTERM in {left:.0f}s" in row
    assert "GpuProcessIdle firing" in row and "4.0 GiB" in row and "… reclaimed" in row
    # Each cell starts under its heading.
    for name, _ in COLUMNS[:3]:
        assert row[header.index(name)] != " "
    assert "GPU 0 [" in plain[5] and "6.0 / 80 GiB" in plain[5]
    assert "t+42s" in plain[0]


def test_a_reclaimed_process_shows_freed_memory_and_the_signals_in_the_audit(
    workload: Workload,
) -> None:
    now = 1_000_000.0
    workload.managed.stop()
    snap = Snapshot(
        at=now,
        cases=[
            {"id": 4, "state": "reclaimed", "freed_bytes": 4 * GiB, "target": {"pid": workload.pid}}
        ],
        signals={4: [{"signal": "SIGTERM", "ts": now - 3}]},
        nvml_up=False,
        events=[
            {
                "ts": now - 40,
                "case": 4,
                "pid": workload.pid,
                "from": "notified",
                "to": "terminating",
                "reason": "grace over",
            },
            {
                "ts": now - 39,
                "case": 4,
                "event": Event.SIGNALS,
                "signal": "SIGTERM",
                "results": [{"pid": workload.pid, "sent": True}, {"pid": 1, "sent": False}],
            },
        ],
    )
    lines = screen(Stack(), workload, snap, Style(color=False))
    header, row = lines[2], lines[3]
    assert row[header.index("HELD") :].startswith("freed ")  # the process is gone
    assert "#4 reclaimed, 4.0 GiB freed" in row
    assert "SIGTERM" in row
    assert "GPU memory: exporter not answering" in lines[5] and "NVML DOWN" in lines[6]
    decisions = lines[lines.index("Recent decisions (audit log)") + 1 :]
    assert "#4 idle-notebook" in decisions[0] and "notified -> terminating" in decisions[0]
    assert decisions[1].endswith(f"case #4: sent SIGTERM to pid {workload.pid}")
