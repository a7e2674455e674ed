"""Notices and contacts as the reconciler and the owner directory give them, for the
tests of what people are told."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from actuator.notifications.notice import Notice, ProvenFacts
from actuator.notifications.owners import Contact

NOW = datetime(2026, 12, 1, 6, 0, tzinfo=ZoneInfo("UTC")).timestamp()  # 14:00 in Shanghai
GiB = 1024**3
LILEI = Contact(
    name="李雷",
    email="lilei@example.com",
    wecom="lilei",
    dingtalk="lilei-dt",
    feishu="ou_lilei",
    slack="U024LILEI",
    language="zh-CN",
    timezone="Asia/Shanghai",
)
BOB = Contact(
    name="Bob", email="bob@example.com", slack="U024BOB", language="en", timezone="Europe/Berlin"
)


def notice(**over: Any) -> Notice:
    """A notice as the reconciler builds it from what the node proved (`facts` fields may be
    given directly: user, project, program, cmdline, ...)."""
    proven = {
        "node": "gpu-node-3",
        "pid": 31337,
        "gpu_uuid": "GPU-2",
        "gpu_index": 2,
        "program": "python train_yolo.py",
        "user": "lilei",
        "project": "vision",
        "memory_bytes": 18 * GiB,
    }
    names = {f.name for f in dataclasses.fields(ProvenFacts)}
    proven |= {k: over.pop(k) for k in list(over) if k in names}
    base: dict[str, Any] = {
        "kind": "warning",
        "case": 42,
        "alertname": "GpuProcessIdle",
        "since": NOW - 7 * 60,
        "deadline": NOW + 600,
        "term_timeout": 10.0,
        "grace": 600.0,
    }
    return Notice(facts=ProvenFacts(**proven), **(base | over))
