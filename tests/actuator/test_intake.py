"""Intake (actuator/intake.py) on a real store and audit log: alerts become cases; a label
names a process and nothing else; what cannot be parsed, or names a node without an agent,
is a refused case; a second alert for a process joins its live case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from actuator.audit import AuditLog
from actuator.config import ActuatorConfig
from actuator.fleet.directory import NodeDirectory
from actuator.intake import Intake
from actuator.models import AlertmanagerAlert, Case, Reason, State
from actuator.store import Store
from tests.helpers.api import alert, body

TICKS, BOOT = "123456", "0b31359f-79be-4c80-b06e-652cb015d9d5"


class CountingNode:
    """The one thing intake asks a node: how many processes it monitors (the breaker)."""

    def __init__(self, monitored: int = 100) -> None:
        self.monitored, self.asked = monitored, 0

    def monitored_count(self) -> int:
        self.asked += 1
        return self.monitored


def labels(pid: int, **over: str) -> dict[str, str]:
    return {
        "alertname": "GpuProcessIdle",
        "reclaim": "true",
        "node": "n1",
        "pid": str(pid),
        "uuid": "GPU-0",
        "start_ticks": TICKS,
        "boot_id": BOOT,
        **over,
    }


def intake(tmp_path: Path, node: CountingNode | None = None) -> tuple[Intake, Store, Path]:
    config = ActuatorConfig.model_validate(
        {
            "storage": {
                "database": str(tmp_path / "db"),
                "audit_log": str(tmp_path / "audit.jsonl"),
            }
        }
    )
    store = Store(tmp_path / "db")
    store.init()
    failed: list[tuple[Case, Exception]] = []
    made = Intake(
        config,
        store,
        AuditLog(tmp_path / "audit.jsonl"),
        NodeDirectory({"n1": node or CountingNode()}),  # type: ignore[dict-item]
        clock=lambda: 1_800_000_000.0,
        mono=lambda: 1000.0,
        pid_max=2**22,
        fence=lambda: None,  # type: ignore[arg-type,return-value]
        step_failed=lambda case, exc: failed.append((case, exc)),
    )
    return made, store, tmp_path / "audit.jsonl"


def post(store: Store, *alerts: dict[str, Any]) -> None:
    parsed = [AlertmanagerAlert.model_validate(a) for a in body(*alerts)["alerts"]]
    store.record_alerts(parsed, 0, 1_800_000_000.0)


def test_alerts_become_cases_named_by_their_labels_alone(tmp_path: Path) -> None:
    made, store, audit = intake(tmp_path)
    post(
        store,
        alert(labels=labels(4242), fingerprint="a", annotations={"start_time": "1.0"}),
        alert(labels=labels(4343, node="n9"), fingerprint="b"),
        alert(labels=labels(4444, uid="root"), fingerprint="c"),
    )
    made.ingest()
    cases = {c.pid or c.fingerprint: c for c in store.list_cases(limit=10)}
    fine = cases[4242]
    assert fine.state == State.PENDING and (fine.node, fine.uuid) == ("n1", "GPU-0")
    assert fine.start_time == 0.0  # the alert's start_time is a claim: the node's comes later
    assert cases[4343].reason_code == Reason.UNKNOWN_NODE  # no agent for n9
    assert cases["c"].reason_code == Reason.BAD_TARGET  # a uid label that is no uid
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert sorted(r["case"] for r in records if r["action"] == "created") == sorted(
        c.id for c in cases.values()
    )


def test_a_second_alert_for_a_process_joins_its_live_case(tmp_path: Path) -> None:
    made, store, _ = intake(tmp_path)
    post(store, alert(labels=labels(4242), fingerprint="a"))
    made.ingest()
    post(store, alert(labels={**labels(4242), "alertname": "GpuProcessStalled"}, fingerprint="b"))
    made.ingest()
    (case,) = store.list_cases(limit=10)
    assert case.alertname == "GpuProcessIdle" and store.pending_episodes() == []


def test_the_breaker_asks_the_node_only_once_enough_are_flagged_to_open_it(
    tmp_path: Path,
) -> None:
    """Below `breaker.min_flagged` (5) no share can open the breaker, so intake does not
    ask the node's agent what it monitors: in a storm that was a round trip per delivery,
    inside the webhook's answer. At the threshold it asks, and 5 of 8 opens it."""
    node = CountingNode(monitored=8)
    made, store, _ = intake(tmp_path, node)
    for pid in range(4201, 4205):
        post(store, alert(labels=labels(pid), fingerprint=str(pid)))
        made.ingest()
    assert node.asked == 0 and store.breaker()[0] is False
    post(store, alert(labels=labels(4205), fingerprint="4205"))
    made.ingest()
    assert node.asked == 1 and store.breaker()[0] is True


def test_a_batch_looks_for_its_processes_live_cases_in_one_read(tmp_path: Path) -> None:
    """Thirty alerts, ten of them for processes with a live case: the batch reads the live
    cases once (a round trip per alert on PostgreSQL held a storm's every pass), and each
    of the ten joins its case."""
    made, store, _ = intake(tmp_path)
    post(store, *(alert(labels=labels(pid), fingerprint=f"a{pid}") for pid in range(100, 110)))
    made.ingest()
    reads: list[str] = []
    real_read = store._read

    def counted(sql: str, params: Any = ()) -> Any:
        reads.append(sql)
        return real_read(sql, params)

    store._read = counted  # type: ignore[method-assign]
    again = {**labels(0), "alertname": "GpuProcessStalled"}
    post(
        store,
        *(alert(labels={**again, "pid": str(p)}, fingerprint=f"b{p}") for p in range(100, 110)),
        *(alert(labels=labels(pid), fingerprint=f"c{pid}") for pid in range(200, 220)),
    )
    made.ingest()
    assert len([sql for sql in reads if "FROM cases WHERE live = 1" in sql]) == 1
    cases = store.list_cases(limit=100)
    assert len(cases) == 30
    assert {c.alertname for c in cases if c.pid < 200} == {"GpuProcessIdle"}
    assert store.pending_episodes() == []


def test_an_alert_naming_its_node_in_an_annotation_joins_its_live_case(tmp_path: Path) -> None:
    """The batch's live cases are read for the nodes its targets name, wherever the alert
    names them (a label, else an annotation): the second alert joins the case, not a
    second case that the store refuses."""
    made, store, _ = intake(tmp_path)
    post(store, alert(labels=labels(4242), fingerprint="a"))
    made.ingest()
    unlabelled = {k: v for k, v in labels(4242).items() if k != "node"}
    post(
        store,
        alert(
            labels={**unlabelled, "alertname": "GpuProcessStalled"},
            fingerprint="b",
            annotations={"node": "n1"},
        ),
    )
    made.ingest()
    cases = store.list_cases(limit=10)
    assert [(c.pid, c.alertname) for c in cases] == [(4242, "GpuProcessIdle")]
    assert store.pending_episodes() == []
