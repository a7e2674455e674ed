"""`gpu-reclaimer agent` (the node's hands for a central actuator) and `gpu-reclaimer certs`
(the fleet's small CA)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
from pathlib import Path
from typing import Any

from actuator.config import ConfigError

log = logging.getLogger(__name__)


def add_commands(commands: Any) -> None:
    agent = commands.add_parser(
        "agent",
        help="serve this node's live re-checks and signals to a central actuator (port 9837)",
        description="The node agent: the central actuator's hands on this node. It inspects "
        "and signals this node's processes only, over mutual TLS (a client certificate from "
        "the fleet CA is required on every call; `gpu-reclaimer certs` makes them). Each "
        "escalation step is carried out at most once, across retries and restarts.",
    )
    agent.add_argument("--config", help="agent YAML (node:, protect:, tls:, journal:)")
    agent.add_argument("--listen", help="HOST:PORT (default 0.0.0.0:9837)")
    agent.add_argument("--sim-dir", help="a simulated node instead of NVML")
    agent.add_argument("--node-name", help="this node's name as the exporter reports it")
    agent.add_argument("--heartbeat-dir", help="where workloads write heartbeats")
    agent.add_argument("--tls-cert", help="the agent's certificate (serverAuth)")
    agent.add_argument("--tls-key", help="its private key")
    agent.add_argument("--client-ca", help="the CA of the actuator's client certificate")
    agent.add_argument("--journal", help="file of escalation steps already carried out")
    agent.add_argument("--check-config", action="store_true", help="validate and exit")
    agent.set_defaults(func=run_agent)

    certs = commands.add_parser(
        "certs",
        help="make the fleet's CA, the actuator's client and the agents' server certificates",
        description="A small CA for mutual TLS between the actuator and its agents. "
        "`certs init` makes ca.pem/ca.key and the actuator's client certificate; "
        "`certs agent NODE` one agent's server certificate. Keys are written 0600.",
    )
    sub = certs.add_subparsers(dest="what", required=True)
    init = sub.add_parser("init", help="the CA and the actuator's client certificate")
    init.add_argument(
        "--dir",
        required=True,
        type=Path,
        help="where to write the CA and the actuator's client certificate "
        "(created; keep it private)",
    )
    one = sub.add_parser("agent", help="a server certificate for one node's agent")
    one.add_argument("node", help="the node name (the exporter's `node` label)")
    one.add_argument("--dir", required=True, type=Path, help="where `certs init` wrote the CA")
    one.add_argument("--dns", action="append", default=[], help="another DNS name (repeat)")
    one.add_argument("--ip", action="append", default=[], help="an IP address (repeat)")
    certs.set_defaults(func=run_certs)


def _agent_config(args: argparse.Namespace) -> Any:
    from actuator.fleet.agent_config import AgentTls, load_agent_config

    config = load_agent_config(args.config)
    node = config.node.model_copy(
        update={
            k: v
            for k, v in (
                ("sim_dir", args.sim_dir),
                ("name", args.node_name),
                ("heartbeat_dir", args.heartbeat_dir),
            )
            if v is not None
        }
    )
    update: dict[str, Any] = {"node": node}
    if args.journal:
        update["journal"] = args.journal
    if args.tls_cert or args.tls_key or args.client_ca:
        if not (args.tls_cert and args.tls_key and args.client_ca):
            raise ConfigError("--tls-cert, --tls-key and --client-ca go together")
        update["tls"] = AgentTls(
            certfile=args.tls_cert, keyfile=args.tls_key, client_ca=args.client_ca
        )
    return config.model_copy(update=update)


def run_agent(args: argparse.Namespace) -> int:
    from actuator.fleet.agent_config import check_agent_tls

    try:
        config = _agent_config(args)
        tls = check_agent_tls(config)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    if args.check_config:
        print(f"agent config OK (node {config.node.name})")
        return 0
    from actuator.fleet.agent_server import serve_agent

    return serve_agent(config, tls, args.listen or config.listen)


def run_certs(args: argparse.Namespace) -> int:
    from actuator.fleet import certs

    try:
        if args.what == "init":
            ca = certs.make_ca(args.dir)
            actuator = certs.issue_actuator(args.dir)
            print(f"CA: {ca.cert} (key {ca.key}, keep it offline)")
            print(f"actuator client certificate: {actuator.cert} (key {actuator.key})")
            return 0
        for ip in args.ip:
            ipaddress.ip_address(ip)
        if not (args.dir / "ca.key").exists():
            log.error(
                "%s: no CA here; run `gpu-reclaimer certs init --dir %s` first", args.dir, args.dir
            )
            return 2
        issued = certs.issue_agent(args.dir, args.node, dns=tuple(args.dns), ips=tuple(args.ip))
        print(f"agent certificate for {args.node}: {issued.cert} (key {issued.key})")
        return 0
    except FileExistsError as exc:
        log.error("%s", exc)
        return 2
    except ValueError as exc:
        log.error("%s", exc)
        return 2
