"""The node agent's HTTP API in-process (actuator/fleet/agent_app.py, Werkzeug's test client,
a real LocalNode on a simulated node, real processes): only this node's targets, a signal
step carried out once however often it is asked, a dry run that sends nothing, and every
malformed request refused whole with its reason. Over mutual TLS: tests/fleet/test_fleet.py."""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import Client

from actuator.fleet import wire
from actuator.fleet.agent_app import MAX_BODY, create_agent_app
from actuator.fleet.journal import SignalJournal
from actuator.live import target_of
from actuator.models import Member, Target
from actuator.node import LocalNode
from actuator.policy import Protect
from exporter.sim.state import init_node
from tests.helpers.actuator import NODE, Workload, Workloads
from tests.support import wait_until

GIB = 1 << 30


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    init_node(tmp_path / "node", gpus=2, memory_total=80 * GIB, name="NVIDIA H100 80GB HBM3")
    return tmp_path / "node"


@pytest.fixture
def workloads(node_dir: Path) -> Iterator[Workloads]:
    made = Workloads(node_dir)
    yield made
    made.cleanup()


@pytest.fixture
def agent(node_dir: Path, tmp_path: Path) -> Client:
    # The tests' processes are root's: nothing protects them here but the agent's checks.
    protect = Protect(protect_root=False, protected_uid_below=0)
    node = LocalNode(NODE, protect, sim_dir=str(node_dir), sm_window=0.5)
    app = create_agent_app(node, SignalJournal(tmp_path / "journal.sqlite"), clock=lambda: 1e9)
    return Client(app)


def _target(w: Workload) -> Target:
    return target_of(NODE, w.pid, w.uuid)


def _signal(w: Workload, key: str, **over: Any) -> dict[str, Any]:
    target = _target(w)
    members = [Member(target.pid, target.start_ticks, 0)]
    body = {
        "key": key,
        "target": wire.dump_target(target),
        "members": wire.dump_members(members),
        "signal": "SIGTERM",
        **over,
    }
    return body


def test_health_and_what_it_serves(agent: Client) -> None:
    assert agent.get("/-/healthy").json == {"node": NODE, "now": 1e9, "status": "ok"}
    ready = agent.get("/-/ready")
    assert ready.status_code == 200 and ready.json["monitored"] == 0
    assert agent.get("/v1/node").json["protocol"] == wire.PROTOCOL
    assert b"gpu_reclaimer_agent_info{" in agent.get("/metrics").data


def test_a_process_of_this_node_is_inspected_another_node_s_refused(
    agent: Client, workloads: Workloads
) -> None:
    w = workloads.spawn(memory="3GiB")
    answer = agent.post("/v1/inspect", json={"target": wire.dump_target(_target(w))})
    assert answer.status_code == 200, answer.json
    live = wire.load_live(answer.json["live"])
    assert live.exists and live.on_gpu and live.gpu_memory_bytes == 3 * GIB
    assert [m.pid for m in live.members] == [w.pid]
    elsewhere = replace(_target(w), node="node-b")
    refused = agent.post("/v1/inspect", json={"target": wire.dump_target(elsewhere)})
    assert refused.status_code == 403 and "serves node" in refused.json["error"]


def test_a_node_s_due_re_checks_are_answered_together_in_the_order_asked(
    agent: Client, workloads: Workloads
) -> None:
    small, large = workloads.spawn(memory="1GiB"), workloads.spawn(memory="3GiB")
    gone = replace(_target(small), pid=small.pid, start_ticks=_target(small).start_ticks + 1)
    asked = [_target(large), gone, _target(small)]
    answer = agent.post("/v1/inspect-many", json={"targets": [wire.dump_target(t) for t in asked]})
    assert answer.status_code == 200, answer.json
    lives = wire.load_lives(answer.json["lives"], 3)
    assert [live.gpu_memory_bytes for live in lives] == [3 * GIB, None, GIB]
    assert lives[1].start_ticks != gone.start_ticks  # another process under that PID
    # Any target of another node refuses the whole request; so do none and too many.
    elsewhere = [*asked[:1], replace(_target(small), node="node-b")]
    refused = agent.post(
        "/v1/inspect-many", json={"targets": [wire.dump_target(t) for t in elsewhere]}
    )
    assert refused.status_code == 403 and "serves node" in refused.json["error"]
    for count in (0, wire.MAX_INSPECT + 1):
        body = {"targets": [wire.dump_target(_target(small))] * count}
        assert agent.post("/v1/inspect-many", json=body).status_code == 422


def test_a_node_s_re_checks_asked_together_read_the_host_s_room_once(
    node_dir: Path, tmp_path: Path, workloads: Workloads
) -> None:
    """What is one figure for the node (a simulated host's memory room) is read once per
    request, as the node's own batch reads it, not once per target."""
    node = LocalNode(
        NODE, Protect(protect_root=False, protected_uid_below=0), sim_dir=str(node_dir)
    )
    assert node.checkpointer is not None
    reads: list[int] = []
    host_room = node.checkpointer.host_room

    def counted() -> int | None:
        reads.append(1)
        return host_room()

    node.checkpointer.host_room = counted  # type: ignore[method-assign]
    agent = Client(create_agent_app(node, SignalJournal(tmp_path / "journal.sqlite")))
    asked = [_target(workloads.spawn(memory="1GiB")) for _ in range(3)]
    answer = agent.post("/v1/inspect-many", json={"targets": [wire.dump_target(t) for t in asked]})
    assert answer.status_code == 200, answer.json
    assert len(wire.load_lives(answer.json["lives"], 3)) == 3 and len(reads) == 1


def test_a_signal_step_is_carried_out_once_however_often_asked(
    agent: Client, workloads: Workloads
) -> None:
    w = workloads.spawn()
    step = _signal(w, "case-1:term")
    first = agent.post("/v1/signal", json=step)
    assert first.status_code == 200, first.json
    assert first.json["replayed"] is False
    assert [r["sent"] for r in first.json["results"]] == [True]
    wait_until(lambda: w.proc.poll() is not None, timeout=20)
    again = agent.post("/v1/signal", json=step)  # a retry after a lost answer, a replay
    assert again.json["replayed"] is True and again.json["results"] == first.json["results"]
    metrics = agent.get("/metrics").data.decode()
    assert 'gpu_reclaimer_agent_signals_total{signal="SIGTERM"} 1.0' in metrics


def test_a_dry_run_sends_nothing_and_takes_no_place_in_the_journal(
    agent: Client, workloads: Workloads, tmp_path: Path
) -> None:
    w = workloads.spawn()
    for _ in range(2):  # asked again, a rehearsal is rehearsed again: it changes nothing
        answer = agent.post("/v1/signal", json=_signal(w, "case-2:term", dry_run=True))
        assert answer.status_code == 200, answer.json
        assert answer.json["replayed"] is False
        assert answer.json["results"] == [
            {"pid": w.pid, "signal": "SIGTERM", "sent": False, "detail": "dry run"}
        ]
    with pytest.raises(subprocess.TimeoutExpired):
        w.proc.wait(timeout=1.0)  # still running
    with sqlite3.connect(tmp_path / "journal.sqlite") as journal:
        assert journal.execute("SELECT count(*) FROM steps").fetchone() == (0,)
    # The real step under the same key is another step: it is carried out.
    real = agent.post("/v1/signal", json=_signal(w, "case-2:term"))
    assert real.json["replayed"] is False and real.json["results"][0]["sent"] is True


def test_a_node_s_rehearsals_are_answered_together_and_send_nothing(
    agent: Client, workloads: Workloads, tmp_path: Path
) -> None:
    first, second = workloads.spawn(), workloads.spawn()
    steps = [
        {k: v for k, v in _signal(w, "unused").items() if k in ("target", "members", "signal")}
        for w in (first, second)
    ]
    answer = agent.post("/v1/rehearse", json={"steps": steps})
    assert answer.status_code == 200, answer.json
    assert answer.json["results"] == [
        [{"pid": w.pid, "signal": "SIGTERM", "sent": False, "detail": "dry run"}]
        for w in (first, second)
    ]
    for w in (first, second):
        with pytest.raises(subprocess.TimeoutExpired):
            w.proc.wait(timeout=0.5)  # still running
    with sqlite3.connect(tmp_path / "journal.sqlite") as journal:
        assert journal.execute("SELECT count(*) FROM steps").fetchone() == (0,)
    # Another node's step refuses the whole request; so do none, too many, and a key
    # (a rehearsal has no step to keep) or a signal off the ladder.
    elsewhere = {**steps[0], "target": {**steps[0]["target"], "node": "node-b"}}
    refused = agent.post("/v1/rehearse", json={"steps": [steps[0], elsewhere]})
    assert refused.status_code == 403 and "serves node" in refused.json["error"]
    for bad in (
        [],
        [steps[0]] * (wire.MAX_INSPECT + 1),
        [{**steps[0], "key": "case-1"}],
        [{**steps[0], "signal": "SIGSTOP"}],
    ):
        assert agent.post("/v1/rehearse", json={"steps": bad}).status_code == 422


@pytest.mark.parametrize(
    ("method", "path", "body", "code"),
    [
        ("post", "/v1/signal", b"not json", 400),
        ("post", "/v1/signal", {"key": "k", "signal": "SIGTERM"}, 422),
        ("post", "/v1/inspect", {"target": {"pid": "one"}}, 422),
        ("get", "/v1/slurm/jobs/12a/processes", None, 422),
        ("get", "/v1/nothing-here", None, 404),
        ("get", "/v1/signal", None, 405),
        ("post", "/v1/alive", b"[" + b" " * MAX_BODY + b"]", 413),
    ],
)
def test_a_malformed_request_is_refused_whole(
    agent: Client, method: str, path: str, body: Any, code: int
) -> None:
    kwargs: dict[str, Any] = {}
    if isinstance(body, bytes):
        kwargs = {"data": body, "content_type": "application/json"}
    elif body is not None:
        kwargs = {"json": body}
    answer = getattr(agent, method)(path, **kwargs)
    assert answer.status_code == code, answer.data
    assert answer.json["error"]


def test_a_signal_other_than_term_or_kill_is_refused(agent: Client, workloads: Workloads) -> None:
    w = workloads.spawn()
    answer = agent.post("/v1/signal", json=_signal(w, "case-3:stop", signal="SIGSTOP"))
    assert answer.status_code == 422
    assert w.proc.poll() is None


def test_a_checkpoint_call_is_carried_out_once_however_often_asked(
    agent: Client, workloads: Workloads
) -> None:
    from exporter.sim import checkpoint as sim

    w = workloads.spawn(memory="2GiB")
    ask = {"key": "case-3-5", "target": wire.dump_target(_target(w)), "call": "suspend"}
    first = agent.post("/v1/checkpoint", json=ask)
    assert first.status_code == 200, first.json
    assert (first.json["ok"], first.json["state"], first.json["replayed"]) == (
        True,
        "checkpointed",
        False,
    )
    again = agent.post("/v1/checkpoint", json=ask)  # a retry after a lost answer
    assert again.json["ok"] is True and again.json["replayed"] is True
    assert sim.get_state(workloads.node_dir, w.pid) == sim.ProcessState.CHECKPOINTED
    live = wire.load_live(agent.post("/v1/inspect", json={"target": ask["target"]}).json["live"])
    assert live.checkpoint_state == "checkpointed" and live.on_gpu is False

    back = agent.post("/v1/checkpoint", json={**ask, "key": "case-3-9", "call": "resume"})
    assert back.json["ok"] is True and back.json["state"] == "running"
    for bad in ({**ask, "call": "stop"}, {**ask, "lock_timeout": 600}):
        assert agent.post("/v1/checkpoint", json=bad).status_code == 422
    elsewhere = wire.dump_target(replace(_target(w), node="node-b"))
    assert agent.post("/v1/checkpoint", json={**ask, "target": elsewhere}).status_code == 403
