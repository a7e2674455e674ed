"""`gpu-reclaimer keep` as an owner runs it (actuator/tools/keep_cli.py), against a Unix socket
that answers as a scripted actuator would: what is asked for each form of the command,
what is printed, and each failure as one line (exit 2)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.sockets import ScriptedSocket, json_line
from tests.support import gpu_reclaimer


def keep(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return gpu_reclaimer("keep", *args, "--socket", str(sock))


# A fixed time: test ids are made from the answers, and every xdist worker must collect the
# same ids (a time read at collection differs between workers).
UNTIL = 4102444800.0  # 2100-01-01


@pytest.mark.parametrize(
    ("args", "answer", "request_", "printed"),
    [
        (
            ["4242", "--for", "2h"],
            json_line(ok=True, case=7, until=UNTIL),
            {"pid": 4242, "action": "keep", "seconds": 7200.0},
            "case 7: process 4242 kept until ",
        ),
        (
            ["4242", "--for", "30m"],
            json_line(ok=True, case=None, until=UNTIL),
            {"pid": 4242, "action": "keep", "seconds": 1800.0},
            "process 4242 kept until ",
        ),
        (
            ["4242", "--revoke"],
            json_line(ok=True),
            {"pid": 4242, "action": "revoke", "seconds": 0.0},
            "process 4242: keep withdrawn",
        ),
        (
            ["4242", "--release"],
            json_line(ok=True, case=7, state="notified", released=True),
            {"pid": 4242, "action": "release", "seconds": 0.0},
            "case 7: release confirmed",
        ),
        (
            ["4242", "--release"],
            json_line(ok=True, case=None, state="keep revoked", released=True, revoked_keep=3),
            {"pid": 4242, "action": "release", "seconds": 0.0},
            "process 4242: your keep ends now",
        ),
        (
            ["--list"],
            json_line(ok=True, keeps=[]),
            {"pid": 0, "action": "list", "seconds": 0.0},
            "no keeps on this node",
        ),
    ],
)
def test_each_form_asks_for_what_it_says(
    tmp_path: Path, args: list[str], answer: bytes, request_: dict[str, Any], printed: str
) -> None:
    sock = tmp_path / "keep.sock"
    server = ScriptedSocket(sock, answer)
    done = keep(sock, *args)
    server.close()
    assert done.returncode == 0, done.stderr
    assert printed in done.stdout, done.stdout
    assert server.requests == [request_]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (json_line(ok=False, error="process 4242 is not yours"), "process 4242 is not yours"),
        (b"", "did not answer as the actuator does"),
        (b"<html>\n", "cannot ask the actuator"),
        (b"[true]\n", "did not answer as the actuator does"),
    ],
)
def test_each_failure_is_one_line(tmp_path: Path, answer: bytes, message: str) -> None:
    sock = tmp_path / "keep.sock"
    server = ScriptedSocket(sock, answer)
    done = keep(sock, "4242", "--for", "1h")
    server.close()
    assert (done.returncode, done.stdout) == (2, ""), done
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_mistakes_are_named_before_anything_is_asked(tmp_path: Path) -> None:
    sock = tmp_path / "keep.sock"
    missing = keep(sock, "--for", "1h")
    assert missing.returncode == 2 and "which process? give its PID" in missing.stderr
    absent = keep(sock, "4242", "--for", "1h")
    assert absent.returncode == 2 and "no keep socket at" in absent.stderr
