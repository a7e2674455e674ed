"""The actuator's API in-process: a runtime on a temporary store, and webhook payloads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actuator.audit import AuditLog
from actuator.config import ActuatorConfig
from actuator.runtime import Runtime
from actuator.store import Store

TOKEN = "s3cret-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def make_runtime(tmp_path: Path, **config: Any) -> Runtime:
    cfg = ActuatorConfig.model_validate(
        {
            "mode": "enforce",
            "notice": {"required": False},
            "storage": {
                "database": str(tmp_path / "db.sqlite"),
                "audit_log": str(tmp_path / "audit.jsonl"),
            },
            **config,
        }
    )
    store = Store(cfg.storage.database)
    store.init()
    return Runtime(config=cfg, store=store, audit=AuditLog(cfg.storage.audit_log), token=TOKEN)


def alert(**over: Any) -> dict[str, Any]:
    a = {
        "status": "firing",
        "labels": {
            "alertname": "GpuProcessIdle",
            "reclaim": "true",
            "node": "n1",
            "pid": "4242",
            "uuid": "GPU-0",
        },
        "annotations": {"start_time": "1700000000.5"},
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": "abc123",
    }
    a.update(over)
    return a


def body(*alerts: dict[str, Any], **over: Any) -> dict[str, Any]:
    b = {
        "version": "4",
        "groupKey": "g",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "reclaim",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://am",
        "alerts": list(alerts),
    }
    b.update(over)
    return b
