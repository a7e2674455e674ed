"""The agent served as it runs on a node (actuator/fleet/agent_server.py: gunicorn, one
worker, mutual TLS): the actuator's certificate is served; a connection without a client
certificate, or with one the fleet CA did not sign, is refused at the handshake; SIGTERM
stops it cleanly. (The agent in a fleet, and another agent's certificate: test_fleet.py.)"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from actuator.fleet import certs
from tests.helpers.fleet import Agent, make_certs, make_node, session

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    pki = make_certs(tmp_path / "pki", ["gpu-01"])
    served = Agent("gpu-01", make_node(tmp_path / "node"), pki, tmp_path).start()
    yield served
    served.kill()


def test_the_fleet_s_actuator_is_served(agent: Agent) -> None:
    answer = session(agent.certs).get(agent.url + "/v1/node", timeout=10)
    assert answer.status_code == 200 and answer.json()["node"] == "gpu-01"


def test_a_caller_without_the_fleet_s_certificate_is_refused_at_the_handshake(
    agent: Agent, tmp_path: Path
) -> None:
    anonymous = requests.Session()
    anonymous.verify = str(agent.certs / "ca.pem")
    with pytest.raises(requests.exceptions.RequestException):
        anonymous.get(agent.url + "/v1/node", timeout=10)
    stranger_ca = tmp_path / "stranger"
    certs.make_ca(stranger_ca)
    certs.issue_actuator(stranger_ca)
    stranger = session(stranger_ca)
    stranger.verify = str(agent.certs / "ca.pem")  # it trusts the agent, not vice versa
    with pytest.raises(requests.exceptions.RequestException):
        stranger.get(agent.url + "/v1/node", timeout=10)


def test_sigterm_stops_the_agent_cleanly(agent: Agent) -> None:
    assert agent.proc is not None
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(30) == 0
