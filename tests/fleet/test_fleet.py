"""A fleet on one machine: two simulated nodes, each with its real `gpu-reclaimer agent`
over mutual TLS, and one central actuator that has no node of its own.

Both nodes share this machine's /proc (the agents are separated by their sim dirs, not by
PID namespaces), which makes the forged-node case sharper: node B's agent can see node A's
process, and must still refuse to act on it as B's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers.actuator import Actuator, Workloads, alert_for, payload
from tests.helpers.fleet import Agent, client_tls, make_certs, make_node, session
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)

NODES = ("node-a", "node-b")


@dataclass
class Fleet:
    certs: Path
    agents: dict[str, Agent]
    workloads: dict[str, Workloads]
    actuator: Actuator


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    base = tmp_path_factory.mktemp("fleet")
    directory = make_certs(base / "certs", list(NODES))
    agents, workloads = {}, {}
    for name in NODES:
        sim = make_node(base / name)
        workloads[name] = Workloads(sim)
        agents[name] = Agent(name, sim, directory, base).start()
    policy = {
        "node": {"name": "central"},
        "agents": {
            "tls": client_tls(directory),
            "static": {name: agent.url for name, agent in agents.items()},
            "timeout": "2s",
            "unreachable_wait": "1s",
            "unreachable_give_up": "60s",
        },
    }
    actuator = Actuator(base / "actuator", base / "unused", policy).start()
    yield Fleet(directory, agents, workloads, actuator)
    actuator.stop()
    for a in agents.values():
        a.kill()
    for w in workloads.values():
        w.cleanup()


def _signals(case: dict) -> list[tuple[int, str]]:
    return [(s["pid"], s["signal"]) for s in case["signals"]]


def test_an_idle_process_on_node_b_is_reclaimed_on_node_b_only(fleet: Fleet) -> None:
    on_a = fleet.workloads["node-a"].spawn(memory="2GiB")
    on_b = fleet.workloads["node-b"].spawn(memory="3GiB")
    assert fleet.actuator.post(payload(alert_for(on_b, node="node-b"))).status_code == 200
    case = fleet.actuator.wait_state(on_b, "reclaimed", "failed", "refused", "cancelled")
    assert case["state"] == "reclaimed", case
    assert case["target"]["node"] == "node-b"
    assert _signals(case) == [(on_b.pid, "SIGTERM")]
    assert case["freed_bytes"] == 3 * 1024**3
    wait_until(lambda: not on_b.alive(), 5)
    assert on_a.alive()  # the other node's idle process, never alerted, is untouched


def test_a_forged_alert_naming_node_a_s_process_as_node_b_s_is_refused(fleet: Fleet) -> None:
    on_a = fleet.workloads["node-a"].spawn(memory="2GiB")
    # The same PID and identity, claimed to be on node B, with node A's GPU or node B's.
    b_gpu = fleet.workloads["node-b"].uuid(0)
    forged_a_gpu = alert_for(on_a, node="node-b")
    forged_b_gpu = alert_for(on_a, node="node-b", uuid=b_gpu)
    fleet.actuator.post(payload(forged_a_gpu))
    first = wait_until(lambda: _ended(fleet.actuator, forged_a_gpu["fingerprint"]), 20)
    fleet.actuator.post(payload(forged_b_gpu))
    second = wait_until(lambda: _ended(fleet.actuator, forged_b_gpu["fingerprint"]), 20)
    assert first["state"] == "refused" and "not found on the node" in first["reason"], first
    # On B's GPU the process holds nothing: nothing to reclaim there.
    assert second["state"] in {"cancelled", "refused"} and second["signals"] == [], second
    assert first["signals"] == []
    time.sleep(0.5)
    assert on_a.alive()


def test_an_alert_for_a_node_without_an_agent_is_refused(fleet: Fleet) -> None:
    w = fleet.workloads["node-a"].spawn(memory="1GiB")
    alert = alert_for(w, node="node-c")
    fleet.actuator.post(payload(alert))
    case = wait_until(lambda: _ended(fleet.actuator, alert["fingerprint"]), 20)
    assert case["state"] == "refused" and case["reason_code"] == "unknown_node", case
    assert w.alive()


def test_a_case_whose_agent_is_down_waits_is_deferred_and_resumes(fleet: Fleet) -> None:
    agent = fleet.agents["node-a"]
    w = fleet.workloads["node-a"].spawn(memory="2GiB")
    agent.kill()
    try:
        fleet.actuator.post(payload(alert_for(w, node="node-a")))
        case = fleet.actuator.wait_state(w, "deferred", "reclaimed", "refused", "cancelled")
        assert case["state"] == "deferred" and case["reason_code"] == "agent_unreachable", case
        assert "has not answered" in case["reason"]
        time.sleep(1.5)
        assert w.alive()
        assert fleet.actuator.case_for(w)["state"] == "deferred"
    finally:
        agent.start()  # same port, same journal
    case = fleet.actuator.wait_state(w, "reclaimed", "failed", "refused", "cancelled")
    assert case["state"] == "reclaimed", case
    states = [t["state"] for t in case["timeline"]]
    assert states[:2] == ["pending", "deferred"] and "terminating" in states


def _ended(actuator: Actuator, fingerprint: str) -> dict | None:
    for c in actuator.cases(limit=1000):
        if c["fingerprint"] == fingerprint and c["state"] in {
            "refused",
            "cancelled",
            "reclaimed",
            "failed",
        }:
            return actuator.get(f"/api/v1/cases/{c['id']}")
    return None


# -- the agent itself ------------------------------------------------------------------


def test_the_agent_refuses_plain_anonymous_and_agent_certificates(fleet: Fleet) -> None:
    agent = fleet.agents["node-b"]
    with pytest.raises(requests.ConnectionError):
        requests.get(agent.url.replace("https", "http") + "/v1/node", timeout=3)
    anonymous = requests.Session()
    anonymous.verify = str(fleet.certs / "ca.pem")
    with pytest.raises(requests.exceptions.SSLError):
        anonymous.get(agent.url + "/v1/node", timeout=3)
    # Node A's agent key is the CA's too, but only for serving: it cannot call node B.
    with pytest.raises(requests.exceptions.SSLError):
        session(fleet.certs, "agent-node-a").get(agent.url + "/v1/node", timeout=3)
    ok = session(fleet.certs).get(agent.url + "/v1/node", timeout=3)
    assert ok.status_code == 200 and ok.json()["node"] == "node-b"


def test_the_agent_acts_only_on_its_own_node_and_each_step_once(fleet: Fleet) -> None:
    agent = fleet.agents["node-b"]
    w = fleet.workloads["node-b"].spawn("--ignore-sigterm", memory="1GiB")
    client = session(fleet.certs)
    target = {
        "node": "node-b",
        "pid": w.pid,
        "start_ticks": w.start_ticks,
        "boot_id": alert_for(w)["labels"]["boot_id"],
        "uuid": w.uuid,
        "start_time": w.start_time,
    }
    member = {"pid": w.pid, "start_ticks": w.start_ticks, "uid": None}
    step = {"key": "case-9999", "target": target, "members": [member], "signal": "SIGTERM"}
    elsewhere = client.post(
        agent.url + "/v1/signal", timeout=5, json={**step, "target": {**target, "node": "node-a"}}
    )
    assert elsewhere.status_code == 403, elsewhere.text
    before = _sigterms(client, agent)
    first = client.post(agent.url + "/v1/signal", json=step, timeout=5).json()
    again = client.post(agent.url + "/v1/signal", json=step, timeout=5).json()
    assert [r["sent"] for r in first["results"]] == [True] and not first["replayed"]
    assert again["replayed"] and again["results"] == first["results"]
    assert _sigterms(client, agent) == before + 1  # once
    agent.kill()
    agent.start()  # restarted mid-escalation: the journal remembers the step
    after = client.post(agent.url + "/v1/signal", json=step, timeout=5).json()
    assert after["replayed"] and after["results"] == first["results"]
    bad = client.post(agent.url + "/v1/signal", json={**step, "signal": "SIGSTOP"}, timeout=5)
    assert bad.status_code == 422
    assert w.alive()  # it ignores SIGTERM; it was sent exactly once


def _sigterms(client: requests.Session, agent: Agent) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = client.get(agent.url + "/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpu_reclaimer_agent_signals_total" and sample.labels == {
                "signal": "SIGTERM"
            }:
                return sample.value
    return 0.0


def test_a_node_whose_clock_differs_is_read_on_the_actuator_s_clock(fleet: Fleet) -> None:
    from actuator.fleet.remote import ClientTls, RemoteNode
    from actuator.live import target_of

    w = fleet.workloads["node-b"].spawn(memory="1GiB")
    tls = ClientTls(
        str(fleet.certs / "ca.pem"),
        str(fleet.certs / "actuator.pem"),
        str(fleet.certs / "actuator.key"),
    )
    ahead = 3600.0  # this actuator's clock is an hour ahead of the node's
    node = RemoteNode("node-b", fleet.agents["node-b"].url, tls, clock=lambda: time.time() + ahead)
    target = target_of("node-b", w.pid, w.uuid)
    live = node.inspect(target)
    assert live.exists and live.start_ticks == w.start_ticks  # identity: clock-free
    assert abs(live.sampled_at - (time.time() + ahead)) < 5
    assert live.start_time is not None and abs(live.start_time - (w.start_time + ahead)) < 5
    # Talking to an agent under the wrong name is not an answer.
    wrong = RemoteNode("node-a", fleet.agents["node-b"].url, tls)
    from actuator.node import NodeUnreachable

    with pytest.raises(NodeUnreachable, match="serves node 'node-b'"):
        wrong.alive([])


def test_a_silent_agent_costs_one_timeout_then_fails_fast(fleet: Fleet) -> None:
    import socket

    from actuator.fleet.remote import ClientTls, RemoteNode
    from actuator.models import Member
    from actuator.node import NodeUnreachable

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepts connections into the backlog, never answers
    try:
        tls = ClientTls(
            str(fleet.certs / "ca.pem"),
            str(fleet.certs / "actuator.pem"),
            str(fleet.certs / "actuator.key"),
        )
        node = RemoteNode(
            "node-z", f"https://127.0.0.1:{silent.getsockname()[1]}", tls, timeout=1.0
        )
        began = time.monotonic()
        with pytest.raises(NodeUnreachable, match="Timeout"):
            node.alive([Member(1, 1)])
        assert 0.9 <= time.monotonic() - began < 5
        began = time.monotonic()
        with pytest.raises(NodeUnreachable, match="not retried"):
            node.inspect(_target_on("node-z"))
        assert time.monotonic() - began < 0.1
        assert node.monitored_count() is None  # unknown, and fast
    finally:
        silent.close()


def _target_on(name: str) -> Any:
    from actuator.models import Target

    return Target(name, 1, 1, "0" * 8 + "-0000-0000-0000-" + "0" * 12, "GPU-x")
