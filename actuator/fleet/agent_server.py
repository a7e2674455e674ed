"""Run the node agent under gunicorn: one worker (the node's pidfds live in one process),
threads for concurrent calls, mutual TLS required on every connection."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

from actuator.fleet.agent_app import create_agent_app
from actuator.fleet.agent_config import AgentConfig, AgentTls
from actuator.fleet.journal import SignalJournal
from actuator.heap import settle_heap
from actuator.node import local_node
from actuator.startup import load_node_projects
from exporter import ownprocs
from exporter.logs import gunicorn_logconfig

log = logging.getLogger(__name__)


class AgentApplication(BaseApplication):
    def __init__(self, config: AgentConfig, tls: AgentTls, listen: str) -> None:
        self.config = config
        self.tls = tls
        self.listen = listen
        super().__init__()

    def load_config(self) -> None:
        settings: dict[str, Any] = {
            "bind": [self.listen],
            "workers": 1,
            "worker_class": "gthread",
            "threads": self.config.threads,
            "timeout": 30,
            "graceful_timeout": 10,
            "keepalive": 30,
            "certfile": self.tls.certfile,
            "keyfile": self.tls.keyfile,
            "ca_certs": self.tls.client_ca,
            "cert_reqs": ssl.CERT_REQUIRED,  # no client certificate, no connection
            "limit_request_line": 8190,
            "limit_request_fields": 100,
            "preload_app": False,
            "proc_name": "gpu-reclaimer-agent",
            "accesslog": None,
            "errorlog": "-",
            "loglevel": logging.getLevelName(logging.getLogger().level).lower(),
            "logconfig_dict": gunicorn_logconfig(),  # one format: gunicorn's lines too
            "post_worker_init": lambda _worker: settle_heap(),  # built: out of collections
        }
        if "control_socket_disable" in self.cfg.settings:
            settings["control_socket_disable"] = True
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        settings = self.config.node
        node = local_node(
            settings, self.config.protect, self.config.sm_window, load_node_projects(settings)
        )
        journal = SignalJournal(self.config.journal)
        journal.prune(self.config.journal_keep)
        ownprocs.register("agent-worker")
        return create_agent_app(node, journal)


def serve_agent(config: AgentConfig, tls: AgentTls, listen: str) -> int:
    Path(config.journal).parent.mkdir(parents=True, exist_ok=True)
    log.info("agent for node %s listening on %s (mutual TLS)", config.node.name, listen)
    own = ownprocs.register("agent")
    try:
        AgentApplication(config, tls, listen).run()
    finally:
        ownprocs.unregister(own)
    return 0
