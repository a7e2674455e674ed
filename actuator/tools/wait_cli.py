"""`gpu-reclaimer wait --gpus N [--memory SIZE] [--for DURATION]`: wait on this node until
enough GPU is free, then say where (a host's queue when it has no scheduler)."""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from typing import Any

from actuator.tools.keep_cli import DEFAULT_SOCKET
from exporter import argtypes
from exporter.argtypes import CommandError
from exporter.units import format_duration

MAX_ANSWER = 2**20
EXIT_GAVE_UP = 3  # --for passed with nothing free: not a mistake, so not 2


class GaveUp(CommandError):
    """Nothing was free within `--for`."""


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "wait",
        help="wait on this node until enough GPU is free, then print where",
        description="Join this node's wait list and block until enough GPU is free: N whole "
        "GPUs nothing holds memory on, or one GPU with SIZE of memory free. Waiters are "
        "served first come first. Where the site reclaims on demand, an idle process may be "
        "reclaimed for you (its owner is warned first). When your GPUs are free, the last "
        "line on standard output is `export CUDA_VISIBLE_DEVICES=...` (for `eval`); progress "
        "goes to standard error. The actuator knows who you are from the socket "
        "(SO_PEERCRED).",
        epilog='Examples: eval "$(gpu-reclaimer wait --gpus 2 --for 1h)" && python train.py; '
        "gpu-reclaimer wait --memory 20GiB; gpu-reclaimer wait --list. Exit status: 0 your "
        "GPUs are free; 2 a usage error, or the actuator refused or could not be reached; "
        f"{EXIT_GAVE_UP} nothing was free within --for (gave up waiting).",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--gpus",
        type=argtypes.positive_int,
        metavar="N",
        help="whole GPUs on this node that nothing holds memory on",
    )
    what.add_argument(
        "--memory", type=argtypes.size, metavar="SIZE", help="free memory on one GPU (e.g. 20GiB)"
    )
    what.add_argument("--list", action="store_true", help="show the queue on this node")
    parser.add_argument(
        "--for",
        dest="seconds",
        type=argtypes.duration,
        default=86400.0,
        metavar="DURATION",
        help="give up after this long (default 24h)",
    )
    parser.add_argument(
        "--socket",
        default=DEFAULT_SOCKET,
        help=f"the actuator's socket on the node (default {DEFAULT_SOCKET})",
    )
    parser.set_defaults(func=run_wait)


def _ask(path: str, request: dict[str, Any], timeout: float) -> tuple[socket.socket, Any]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except FileNotFoundError:
        sock.close()
        raise CommandError(
            f"no socket at {path}: is the actuator running on this node with "
            "server.keep_socket set?"
        ) from None
    except OSError as exc:
        sock.close()
        raise CommandError(f"cannot reach the actuator at {path}: {exc}") from None
    sock.sendall(json.dumps(request).encode() + b"\n")
    return sock, sock.makefile("rb")


def _line(reader: Any) -> dict[str, Any]:
    raw = reader.readline(MAX_ANSWER)
    if not raw:
        raise CommandError("the actuator closed the connection (restarted?): wait again")
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise CommandError("the socket did not answer as the actuator does (not its JSON)")
    if not answer.get("ok"):
        if answer.get("why") == "expired":
            raise GaveUp(str(answer.get("error", "nothing was free in time")))
        raise CommandError(str(answer.get("error", "refused")))
    return answer


def run_wait(args: argparse.Namespace) -> int:
    if args.list:
        sock, reader = _ask(args.socket, {"action": "waiters", "pid": 0}, 10.0)
        with sock:
            waiters = _line(reader)["waiters"]
        for w in waiters:
            wants = f"{w['gpus']} GPU(s)" if w["gpus"] else f"{w['memory']} bytes on one GPU"
            since = format_duration(max(0.0, time.time() - w["since"]))
            print(
                f"{w['position']:>3}. {w['user']} (uid {w['uid']}) wants {wants}, waiting {since}"
            )
        if not waiters:
            print("nobody is waiting on this node")
        return 0
    request = {
        "action": "wait",
        "gpus": args.gpus or 0,
        "memory": args.memory or 0,
        "seconds": args.seconds,
    }
    sock, reader = _ask(args.socket, request, args.seconds + 30.0)
    with sock:
        queued = _line(reader)
        print(
            f"waiting on {queued['node']} (position {queued['position']}; up to "
            f"{format_duration(args.seconds)})...",
            file=sys.stderr,
            flush=True,
        )
        try:
            served = _line(reader)
        except TimeoutError:
            raise CommandError("the actuator did not answer in time") from None
        except GaveUp as gave_up:
            print(f"gpu-reclaimer wait: gave up: {gave_up}", file=sys.stderr)
            return EXIT_GAVE_UP
    try:
        gpus = [(int(g["index"]), str(g["uuid"]), g.get("memory_free")) for g in served["gpus"]]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise CommandError("the actuator's answer names no GPUs: wait again") from None
    for index, uuid, memory_free in gpus:
        free = f", {memory_free / 2**30:.1f} GiB free" if isinstance(memory_free, int) else ""
        print(f"GPU {index} ({uuid}) on {served.get('node')} is yours{free}", file=sys.stderr)
    # `export`: `eval "$(gpu-reclaimer wait ...)" && python train.py` hands it to the job.
    devices = ",".join(str(index) for index, _, _ in gpus)
    print(f"export CUDA_VISIBLE_DEVICES={devices}", flush=True)
    return 0
