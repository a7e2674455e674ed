"""The node agent's settings: its node's evidence (as the exporter has it), its protection,
its TLS identity and the client CA that admits the central actuator."""

from __future__ import annotations

import os

from pydantic import Field

from actuator.config import ConfigError, NodeConfig, load_model
from actuator.policy import Duration, Protect, Strict

DEFAULT_AGENT_PORT = 9837


class AgentTls(Strict):
    """Mutual TLS, always: plain or unauthenticated calls never reach the node's hands."""

    certfile: str = Field(min_length=1, description="the agent's certificate (serverAuth)")
    keyfile: str = Field(min_length=1, description="its private key")
    client_ca: str = Field(
        min_length=1, description="CA whose clientAuth certificates may call (the actuator's)"
    )


class AgentConfig(Strict):
    listen: str = f"0.0.0.0:{DEFAULT_AGENT_PORT}"
    node: NodeConfig = Field(default_factory=NodeConfig)
    protect: Protect = Protect()
    sm_window: Duration = Field(10.0, gt=0, description="the rules' SM utilisation window")
    tls: AgentTls | None = None
    journal: str = Field(
        "/var/lib/gpu-reclaimer/agent.db", description="escalation steps already carried out"
    )
    journal_keep: Duration = Field(7 * 86400.0, ge=3600)
    threads: int = Field(8, ge=1, le=64)


def load_agent_config(path: str | os.PathLike[str] | None) -> AgentConfig:
    return AgentConfig() if path is None else load_model(path, AgentConfig)


def check_agent_tls(config: AgentConfig) -> AgentTls:
    if config.tls is None:
        raise ConfigError(
            "tls: the agent serves mutual TLS only (tls.certfile, tls.keyfile, tls.client_ca, "
            "or --tls-cert/--tls-key/--client-ca); `gpu-reclaimer certs` makes them"
        )
    for key in ("certfile", "keyfile", "client_ca"):
        path = getattr(config.tls, key)
        if not os.access(path, os.R_OK):
            raise ConfigError(f"tls.{key}: {path} is not readable")
    return config.tls
