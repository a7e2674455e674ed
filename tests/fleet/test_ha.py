"""Two actuator replicas on one real PostgreSQL database: one holds the lease and acts;
killing it mid-escalation lets the other finish, with no signal sent twice."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from actuator.store import open_store
from tests.helpers.actuator import Actuator, Workloads, alert_for, payload
from tests.helpers.fleet import Agent, client_tls, make_certs, make_node
from tests.support import wait_until

pytestmark = pytest.mark.timeout(150)


def _leader(dsn: str, replicas: list[Actuator]) -> Actuator:
    holder = open_store(dsn).progress()
    assert holder is not None, "no replica holds the lease"
    pid = int(holder[0].split(":")[1])
    (leader,) = [r for r in replicas if r.proc is not None and os.getpgid(pid) == r.proc.pid]
    return leader


def test_the_leader_killed_mid_escalation_the_other_replica_finishes(
    tmp_path: Path, pg_server
) -> None:
    dsn = pg_server.new_database()
    directory = make_certs(tmp_path / "certs", ["node-a"])
    sim = make_node(tmp_path / "node-a")
    workloads = Workloads(sim)
    agent = Agent("node-a", sim, directory, tmp_path).start()
    policy = {
        "node": {"name": "central"},
        "storage": {"database": dsn},
        "agents": {"tls": client_tls(directory), "static": {"node-a": agent.url}},
        # Long enough between SIGTERM and SIGKILL to kill the leader in between.
        "defaults": {"term_timeout": "6s"},
    }
    replicas = [Actuator(tmp_path / f"replica-{i}", tmp_path / "unused", policy) for i in (1, 2)]
    try:
        for r in replicas:
            r.start()
        w = workloads.spawn("--ignore-sigterm", memory="2GiB")
        # Alertmanager sends every notification to both replicas.
        for r in replicas:
            assert r.post(payload(alert_for(w, node="node-a"))).status_code == 200
        case = replicas[0].wait_state(w, "terminating", "reclaimed", "refused", "cancelled")
        assert case["state"] == "terminating", case

        # Mid-escalation: the SIGTERM sent and recorded (the state is committed before the
        # signal goes out, so "terminating" alone can be seen before it), the SIGKILL not yet.
        def signalled() -> dict[str, Any] | None:
            c = replicas[0].case_for(w)
            return c if c is not None and c["signals"] else None

        first = wait_until(signalled, 5, 0.05)
        assert first is not None
        assert [(s["pid"], s["signal"]) for s in first["signals"]] == [(w.pid, "SIGTERM")], first
        leader = _leader(dsn, replicas)
        leader.kill()
        (survivor,) = [r for r in replicas if r is not leader]
        case = survivor.wait_state(w, "reclaimed", "failed", timeout=40)
        assert case["state"] == "reclaimed", case
        sent = [(s["pid"], s["signal"]) for s in case["signals"]]
        assert sent == [(w.pid, "SIGTERM"), (w.pid, "SIGKILL")]  # each once
        wait_until(lambda: w.exit_code, 5)
        assert w.exit_code == [-9]
        states = [t["state"] for t in case["timeline"]]
        assert states == ["pending", "notified", "terminating", "killing", "reclaimed"]
        assert _leader(dsn, replicas) is survivor
    finally:
        for r in replicas:
            r.kill()
        agent.kill()
        workloads.cleanup()
