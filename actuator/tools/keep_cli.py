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
from exporter.units import format_duration

DEFAULT_SOCKET = "/run/gpu-reclaimer/keep.sock"


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "keep",
        help="keep one of your GPU processes from being reclaimed (on the node)",
        description="Ask the actuator on this node to keep process PID for a while, or to "
        "release it now. A process with an open case has the case snoozed; one that has not "
        "been flagged yet is kept in advance (a long evaluation with quiet phases): if a case "
        "opens for that very process before the time is up, it is snoozed at once. You may "
        "act on your own processes; root and the configured SRE groups on any. The actuator "
        "knows who you are from the socket (SO_PEERCRED): there is nothing to log in to.",
        epilog="Examples: gpu-reclaimer keep 31337 --for 4h; gpu-reclaimer keep --list; "
        "gpu-reclaimer keep 31337 --revoke",
    )
    parser.add_argument(
        "pid",
        nargs="?",
        type=argtypes.positive_int,
        help="the process to keep (with --list: the one whose keeps to show)",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--for",
        dest="seconds",
        type=argtypes.duration,
        metavar="DURATION",
        help="how long to keep it (e.g. 2h; at most the site's keep_max)",
    )
    what.add_argument(
        "--release", action="store_true", help="you are done: let the GPU be reclaimed now"
    )
    what.add_argument(
        "--list",
        action="store_true",
        help="keeps on this node, asked in advance or on open cases (yours; root: all); with "
        "a PID, that process's only",
    )
    what.add_argument(
        "--revoke", action="store_true", help="withdraw a keep asked in advance for PID"
    )
    parser.add_argument(
        "--socket",
        default=DEFAULT_SOCKET,
        help=f"the actuator's keep socket (default {DEFAULT_SOCKET})",
    )
    parser.set_defaults(func=run_keep)


def run_keep(args: argparse.Namespace) -> int:
    from actuator.keep_socket import request_keep

    action = (
        "list"
        if args.list
        else "revoke"
        if args.revoke
        else ("release" if args.release else "keep")
    )
    if action != "list" and args.pid is None:
        raise CommandError("which process? give its PID (or --list)")
    # `keep PID --list`: that process's keeps only (the answer is filtered by PID).
    try:
        answer = request_keep(args.socket, args.pid or 0, action, args.seconds or 0.0)
    except FileNotFoundError:
        raise CommandError(
            f"no keep socket at {args.socket}: is the actuator running on this "
            "node with server.keep_socket set?"
        ) from None
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot ask the actuator at {args.socket}: {exc}") from None
    if not answer.get("ok"):
        raise CommandError(str(answer.get("error", "refused")))
    if action == "list":
        keeps = answer.get("keeps", [])
        for keep in keeps:
            left = format_duration(max(0.0, keep["until"] - time.time()))
            case = keep.get("case")
            what = f"case {case}: " if case is not None else "in advance: "
            print(
                f"{what}PID {keep['pid']} (uid {keep['uid']}) kept until "
                f"{_local(keep['until'])} ({left} left)"
            )
        if not keeps:
            whose = f" for process {args.pid}" if args.pid else ""
            print(f"no keeps on this node{whose}")
    elif action == "revoke":
        print(f"process {args.pid}: keep withdrawn")
    elif answer.get("released") and answer.get("state") == "notified":
        print(f"case {answer['case']}: release confirmed; the GPU will be reclaimed shortly")
    elif answer.get("released"):
        ended = f"case {answer['case']}: " if answer.get("case") is not None else ""
        print(
            f"{ended}process {args.pid}: your keep ends now; it is judged as any process is "
            "(warned before anything is reclaimed)"
        )
    elif answer.get("case") is None:
        print(
            f"process {args.pid} kept until {_local(answer['until'])}, before any case: "
            "if it is flagged meanwhile, it is kept"
        )
    else:
        print(f"case {answer['case']}: process {args.pid} kept until {_local(answer['until'])}")
    sys.stdout.flush()
    return 0


def _local(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(ts))
