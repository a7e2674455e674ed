"""A simulated node's `gpu-reclaimer agent` on one machine: its files and its command line,
in one place for the demo stack, the chaos run and the tests (the certificate names are
the ones `actuator/fleet/certs.py` issues)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SimAgent:
    node: str  # the node's name, as the agent's certificate names it
    listen: str  # host:port
    config: Path
    sim_dir: Path  # the simulated node the agent reads instead of NVML
    heartbeat_dir: Path
    certs_dir: Path  # the fleet CA's directory: ca.pem, agent-NODE.pem, agent-NODE.key
    journal: Path

    @property
    def cert(self) -> Path:
        return self.certs_dir / f"agent-{self.node}.pem"

    @property
    def key(self) -> Path:
        return self.certs_dir / f"agent-{self.node}.key"

    def arguments(self) -> list[str]:
        """`gpu-reclaimer` arguments, from the `agent` subcommand on."""
        return [
            "agent",
            "--config",
            str(self.config),
            "--listen",
            self.listen,
            "--sim-dir",
            str(self.sim_dir),
            "--node-name",
            self.node,
            "--heartbeat-dir",
            str(self.heartbeat_dir),
            "--tls-cert",
            str(self.cert),
            "--tls-key",
            str(self.key),
            "--client-ca",
            str(self.certs_dir / "ca.pem"),
            "--journal",
            str(self.journal),
        ]
