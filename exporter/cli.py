"""The `gpu-reclaimer` command: one thin parser, sub-commands registered by each package."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from exporter import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-reclaimer",
        description=(
            "Find GPU processes that hold memory and do no work, and give the GPUs back "
            "without hurting jobs that are still working."
        ),
        epilog="Run 'gpu-reclaimer COMMAND --help' for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging verbosity (default: %(default)s)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    from exporter import server_cli
    from exporter.sim import cli as sim_cli

    server_cli.add_commands(commands)
    sim_cli.add_commands(commands)
    try:
        from actuator import cli as actuator_cli
    except ImportError:  # the actuator is optional on exporter-only installs
        pass
    else:
        actuator_cli.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
