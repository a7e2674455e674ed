"""`gpu-reclaimer keep PID --for 2h` (or `--release`): keep one of your own GPU processes from
being reclaimed, on the node, through the actuator's keep socket (no token, no login: the
kernel tells the actuator your uid)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from exporter import argtypes
from exporter.argtypes import CommandError

DEFAULT_SOCKET = "/run/gpu-reclaimer/keep.sock"


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "keep",
        help="keep one of your GPU processes from being reclaimed (on the node)",
        description="Ask the actuator on this node to keep process PID for a while (its case "
        "is snoozed), or to release it now. You may act on your own processes; root and the "
        "configured SRE groups on any. The actuator knows who you are from the socket "
        "(SO_PEERCRED): there is nothing to log in to.",
        epilog="Example: gpu-reclaimer keep 31337 --for 4h",
    )
    parser.add_argument("pid", type=argtypes.positive_int, help="the process to keep")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--for",
        dest="seconds",
        type=argtypes.duration,
        metavar="DURATION",
        help="how long to keep it (e.g. 2h; at most the site's keep_max)",
    )
    what.add_argument("--release", action="store_true",
                      help="you are done: let the GPU be reclaimed now")  # fmt: skip
    parser.add_argument(
        "--socket",
        default=DEFAULT_SOCKET,
        help=f"the actuator's keep socket (default {DEFAULT_SOCKET})",
    )
    parser.set_defaults(func=run_keep)


def run_keep(args: argparse.Namespace) -> int:
    from actuator.keep_socket import request_keep

    action = "release" if args.release else "keep"
    try:
        answer = request_keep(args.socket, args.pid, action, args.seconds or 0.0)
    except FileNotFoundError:
        raise CommandError(f"no keep socket at {args.socket}: is the actuator running on this "
                           "node with server.keep_socket set?") from None  # fmt: skip
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot ask the actuator at {args.socket}: {exc}") from None
    if not answer.get("ok"):
        raise CommandError(str(answer.get("error", "refused")))
    if answer.get("released"):
        print(f"case {answer['case']}: release confirmed; the GPU will be reclaimed shortly")
    else:
        until = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(answer["until"]))
        print(f"case {answer['case']}: process {args.pid} kept until {until}")
    sys.stdout.flush()
    return 0
