"""A simulated fleet on one machine: per node a sim dir and a real `gpu-reclaimer agent`
(mutual TLS with certificates from `gpu-reclaimer certs`), for tests and benchmarks."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from actuator.demo.agent import SimAgent
from actuator.fleet import certs
from exporter.sim.state import init_node
from tests.support import free_port, gpu_reclaimer_command, wait_until


def make_certs(directory: Path, nodes: list[str], ips: dict[str, str] | None = None) -> Path:
    """The fleet CA, the actuator's certificate, and one agent certificate per node (for
    127.0.0.1, or the node's address in `ips`)."""
    certs.make_ca(directory)
    certs.issue_actuator(directory)
    for node in nodes:
        certs.issue_agent(directory, node, ips=((ips or {}).get(node, "127.0.0.1"),))
    return directory


def client_tls(directory: Path) -> dict[str, str]:
    """The actuator's `agents.tls` settings."""
    return {
        "ca_file": str(directory / "ca.pem"),
        "certfile": str(directory / "actuator.pem"),
        "keyfile": str(directory / "actuator.key"),
    }


def session(directory: Path, stem: str = "actuator") -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    s.verify = str(directory / "ca.pem")
    s.cert = (str(directory / f"{stem}.pem"), str(directory / f"{stem}.key"))
    return s


@dataclass
class Agent:
    node: str
    sim_dir: Path
    certs: Path
    workdir: Path
    port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"  # another loopback address gives each node its own "host"
    proc: subprocess.Popen[bytes] | None = None
    node_settings: dict[str, Any] = field(default_factory=dict)  # more of the config's node:

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / f"agent-{self.node}.log"

    def start(self) -> Agent:
        # Tests run as root: lower the protection explicitly (the shipped default protects root).
        config = self.workdir / f"agent-{self.node}.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "protect": {"protect_root": False, "protected_uid_below": 0},
                    "node": self.node_settings,
                }
            )
        )
        agent = SimAgent(
            node=self.node,
            listen=f"{self.host}:{self.port}",
            config=config,
            sim_dir=self.sim_dir,
            heartbeat_dir=self.workdir / f"heartbeats-{self.node}",
            certs_dir=self.certs,
            journal=self.workdir / f"agent-{self.node}.db",
        )
        command = [*gpu_reclaimer_command(), *agent.arguments()]
        (self.workdir / f"heartbeats-{self.node}").mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)
        client = session(self.certs)
        wait_until(lambda: self._up(client), 30)
        return self

    def _up(self, client: requests.Session) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"agent {self.node} exited: {self.log.read_text()[-2000:]}")
        try:
            return client.get(self.url + "/-/healthy", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def make_node(directory: Path, gpus: int = 2) -> Path:
    init_node(directory, gpus=gpus, memory_total=80 * 1024**3, name="NVIDIA H100 80GB HBM3")
    return directory
