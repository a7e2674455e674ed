"""The `gpu-reclaimer` command: one thin parser; each package registers its own commands.

Commands are entry points of the group ``gpu_reclaimer.commands`` (see pyproject.toml): the
name is the command, the value a function that adds its parser. Only the command being run
is loaded, so `gpu-reclaimer exporter` never imports the actuator or the demo.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points

from exporter import __version__
from exporter.argtypes import CommandError
from exporter.extras import missing_extra

COMMANDS_GROUP = "gpu_reclaimer.commands"


_VALUED_OPTIONS = frozenset({"--log-level"})


def command_entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=COMMANDS_GROUP)}


def chosen_command(argv: Sequence[str], names: set[str] | dict[str, EntryPoint]) -> str | None:
    """The command named on the line (skipping the global options), else None."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUED_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return arg if arg in names else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
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
    found = command_entry_points()
    chosen = chosen_command(sys.argv[1:] if argv is None else argv, found)
    for name in sorted(found):
        if chosen is None or name == chosen:
            found[name].load()(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except ModuleNotFoundError as error:
        missing = missing_extra(error)
        if missing is None:
            raise
        print(f"gpu-reclaimer: error: {missing}", file=sys.stderr)
        return 2


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except CommandError as error:
        # A command with sub-commands sets `command_prog` to the full name (`... sim status`).
        prog = getattr(args, "command_prog", f"{parser.prog} {args.command}")
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
