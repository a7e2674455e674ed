"""`gpu-reclaimer why CASE`: the decisions of one case with the evidence each was judged on,
from the actuator's API (GET /api/v1/cases/<id>/why)."""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from exporter import argtypes
from exporter.argtypes import CommandError

DEFAULT_ACTUATOR = "http://127.0.0.1:9836"
TOKEN_ENV = "GPU_RECLAIMER_TOKEN"


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "why",
        help="why a case was (or was not) reclaimed: its decisions and their evidence",
        description="Print one case's decisions in order, each with what the node showed at "
        "that re-check (SM utilisation, memory, process-tree CPU, log and heartbeat ages) "
        "against the thresholds it was judged by. The evidence is kept with the case for "
        "the actuator's storage.retention.",
        epilog="Example: gpu-reclaimer why 42 --actuator https://actuator:9836 "
        "--token-file /etc/gpu-reclaimer/token",
    )
    parser.add_argument("case", type=argtypes.positive_int, help="the case number")
    parser.add_argument(
        "--actuator",
        default=DEFAULT_ACTUATOR,
        help=f"the actuator's base URL (default {DEFAULT_ACTUATOR})",
    )
    parser.add_argument("--token-file", help=f"file holding the API token (else ${TOKEN_ENV})")
    parser.add_argument("--json", action="store_true", help="print the API's JSON instead")
    parser.set_defaults(func=run_why)


def run_why(args: argparse.Namespace) -> int:
    from actuator.why import Explanation

    body = fetch(args.actuator, args.case, _token(args.token_file))
    if args.json:
        print(json.dumps(body, indent=2, ensure_ascii=False))
    else:
        print(Explanation.from_json(body).render())
    return 0


def _token(token_file: str | None) -> str | None:
    if token_file is None:
        return os.environ.get(TOKEN_ENV) or None
    try:
        return Path(token_file).read_text().strip()
    except OSError as exc:
        raise CommandError(f"cannot read the token file {token_file}: {exc.strerror}") from None


def fetch(base: str, case: int, token: str | None) -> dict[str, Any]:
    if not base.startswith(("http://", "https://")):
        raise CommandError(f"--actuator {base!r} is not an http(s) URL")
    request = urllib.request.Request(f"{base.rstrip('/')}/api/v1/cases/{case}/why")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise CommandError(f"no case {case} at {base}") from None
        if exc.code in (401, 403):
            raise CommandError(
                f"the actuator at {base} refused the request ({exc.code}): give its token "
                f"with --token-file or ${TOKEN_ENV}"
            ) from None
        raise CommandError(f"the actuator at {base} answered {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CommandError(f"cannot reach the actuator at {base}: {reason}") from None
    except ValueError:
        raise CommandError(f"the actuator at {base} did not answer JSON") from None
