"""The `gpu-reclaimer` command: one thin parser; each package registers its own commands.

Commands are entry points of the group ``gpu_reclaimer.commands`` (see pyproject.toml): the
name is the command, the value a function that adds its parser. Only the command being run
is loaded, so `gpu-reclaimer exporter` never imports the actuator or the demo.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points

from exporter import __version__
from exporter.argtypes import CommandError
from exporter.extras import missing_extra
from exporter.logs import (
    FORMAT_ENV,
    LEVEL_ENV,
    LogOptionError,
    setup_logging,
    split_log_options,
)

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
        allow_abbrev=False,  # `--log` belongs to `sim run`, not a prefix of --log-level
        description=(
            "Find GPU processes that hold memory and do no work, and give the GPUs back "
            "without hurting jobs that are still working."
        ),
        epilog="Run 'gpu-reclaimer COMMAND --help' for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Read anywhere on the line by exporter/logs.py; listed here for --help.
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        help="debug, info, warning or error, in any case, before or after the command "
        f"(default: ${LEVEL_ENV}, else info)",
    )
    parser.add_argument(
        "--log-format",
        metavar="FORMAT",
        help=f"text or json (one JSON object per line), for every log line of the process, "
        f"gunicorn's included (default: ${FORMAT_ENV}, else text)",
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
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit: a reader gone is handled below
        return code
    except BrokenPipeError:
        # The reader went away (`... | head`): what it did not read is not an error of ours.
        # Python's own advice: point stdout at devnull so the exit's flush cannot raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # as a shell reports a command ended by SIGPIPE
    except ModuleNotFoundError as error:
        missing = missing_extra(error)
        if missing is None:
            raise
        print(f"gpu-reclaimer: error: {missing}", file=sys.stderr)
        return 2


def _main(argv: Sequence[str] | None) -> int:
    try:
        rest, level, fmt = split_log_options(sys.argv[1:] if argv is None else argv)
    except LogOptionError as error:
        print(f"gpu-reclaimer: error: {error}", file=sys.stderr)
        return 2
    parser = build_parser(rest)
    args = parser.parse_args(rest)
    setup_logging(level, fmt)
    try:
        return int(args.func(args) or 0)
    except CommandError as error:
        # A command with sub-commands sets `command_prog` to the full name (`... sim status`).
        prog = getattr(args, "command_prog", f"{parser.prog} {args.command}")
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
