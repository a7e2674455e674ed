"""`gpu-reclaimer actuator`: the webhook/API server (sub-commands of the one CLI)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from actuator.config import DEFAULT_PORT, ConfigError, config_warnings, load_config
from actuator.startup import (
    check_kubernetes,
    check_notifier,
    check_storage,
    check_tls,
    idle_thresholds,
    load_projects,
    read_token,
)
from exporter.argtypes import CommandError

log = logging.getLogger(__name__)


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "actuator",
        help=f"serve the Alertmanager webhook and reclaim API (default port {DEFAULT_PORT})",
        description="Receive Alertmanager webhooks, re-check GPU processes live, apply the "
        "policy and escalate notice -> SIGTERM -> SIGKILL, with an audit record for every "
        "decision. Runs under gunicorn.",
    )
    parser.add_argument("--config", required=True, help="policy/config YAML file")
    parser.add_argument(
        "--listen", help=f"address to bind, HOST:PORT (default from config, port {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--token-file", help="file holding the API bearer token (else $GPU_RECLAIMER_TOKEN)"
    )
    parser.add_argument("--check-config", action="store_true", help="validate the config and exit")
    parser.set_defaults(func=run_actuator)


def run_actuator(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        token = read_token(config, args.token_file)
        idle_thresholds(config)
        load_projects(config)
        check_notifier(config)
        check_tls(config)
        check_kubernetes(config)
        if args.check_config:
            # At start an unwritable audit log only makes /-/ready fail (a full disk may
            # come back); a config check says so outright.
            check_storage(config)
    except ConfigError as exc:  # a user's mistake: one error, as every command says it
        raise CommandError(str(exc)) from None
    warnings = config_warnings(config)
    if args.check_config:  # a person reads this: the command's own voice, not log lines
        for warning in warnings:
            print(f"gpu-reclaimer actuator: warning: {args.config}: {warning}", file=sys.stderr)
        print(f"{args.config}: OK (mode {config.mode})")
        return 0
    for warning in warnings:
        log.warning("%s: %s", args.config, warning)
    listen = args.listen or config.server.listen
    if ":" not in listen:
        listen = f"{listen}:{DEFAULT_PORT}"
    from actuator.server import serve

    return serve(config, token, listen)
