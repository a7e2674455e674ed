"""A simulated node's agent command: the real `gpu-reclaimer` accepts it, and its
certificate names are the ones the fleet CA issues."""

from __future__ import annotations

from pathlib import Path

import pytest

from actuator.demo.agent import SimAgent
from actuator.fleet import certs
from exporter.cli import main


def _agent(tmp_path: Path, node: str) -> SimAgent:
    config = tmp_path / "agent.yml"
    config.write_text("protect: {protect_root: false, protected_uid_below: 0}\n")
    return SimAgent(
        node=node,
        listen="127.0.0.1:1",
        config=config,
        sim_dir=tmp_path / "node",
        heartbeat_dir=tmp_path / "heartbeats",
        certs_dir=tmp_path / "certs",
        journal=tmp_path / "journal.db",
    )


def test_the_agent_command_is_one_the_agent_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = _agent(tmp_path, "gpu-node-7")
    certs.make_ca(agent.certs_dir)
    issued = certs.issue_agent(agent.certs_dir, agent.node, ips=("127.0.0.1",))
    assert (agent.cert, agent.key) == (issued.cert, issued.key)

    assert main([*agent.arguments(), "--check-config"]) == 0
    assert "node gpu-node-7" in capsys.readouterr().out


def test_an_agent_without_its_certificate_is_refused(tmp_path: Path) -> None:
    agent = _agent(tmp_path, "gpu-node-8")
    certs.make_ca(agent.certs_dir)  # the CA, but no certificate for this node
    assert main([*agent.arguments(), "--check-config"]) == 2
