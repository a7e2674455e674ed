"""`gpu-reclaimer keep` through the node's keep socket: who is asking comes from the kernel
(SO_PEERCRED); hostile local peers (one trickling a byte at a time, a flood of connections
from another uid) never delay the owner; a keep asked before any case is honoured."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

from actuator.keep_socket import PER_UID, REQUEST_DEADLINE_S, request_keep
from tests.helpers.actuator import alert_for, payload
from tests.support import gpu_reclaimer, wait_until

# A local user's processes: one trickles a request a byte every half second; the other opens
# many connections and sends nothing.
TRICKLE = (
    "import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);\n"
    'for b in b\'{"pid": 1, "action": "keep", "seconds": 60}\':\n'
    "    time.sleep(0.5)\n"
    "    try: s.send(bytes([b]))\n"
    "    except OSError: print('cut off'); break\n"
)
FLOOD = (
    "import socket, sys, time; held = []\n"
    "for _ in range(int(sys.argv[2])):\n"
    "    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); held.append(s)\n"
    "print('connected', flush=True); time.sleep(30)\n"
)


def _keep_actuator(
    actuator_factory,
    workloads,
    request: pytest.FixtureRequest,  # type: ignore
    **policy: object,
):
    """An actuator serving a keep socket where another uid can reach it (pytest's own
    directories are private to root); (actuator, socket path) once the socket listens."""
    shared = Path(tempfile.mkdtemp(prefix="keep-socket-"))
    shared.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    sock = shared / "keep.sock"
    defaults = {"grace": "120s", **policy.pop("defaults", {})}  # type: ignore[dict-item]
    actuator = actuator_factory(
        workloads.node_dir, defaults=defaults, server={"keep_socket": str(sock)}, **policy
    )
    wait_until(sock.exists, 20)
    return actuator, sock


def _notified(actuator, w) -> None:  # type: ignore[no-untyped-def]
    assert actuator.post(payload(alert_for(w))).status_code == 200
    wait_until(lambda: (actuator.case_for(w) or {}).get("state") == "notified", 20)


def _keep(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return gpu_reclaimer("keep", *args, "--socket", str(sock), timeout=30)


# The stranger's client: one line of JSON, with the standard library only.
CLIENT = (
    "import json, socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
    "s.sendall(json.dumps({'pid': int(sys.argv[2]), 'action': sys.argv[3], 'seconds': 3600})"
    ".encode() + bytes([10])); print(s.makefile().readline())"
)


def _as_nobody(code: str, *args: str) -> subprocess.Popen[str]:
    return _as_uid(65534, code, *args)


@pytest.mark.reliability(49)
def test_a_slow_or_flooding_peer_never_delays_the_owners_keep(
    workloads, actuator_factory, request: pytest.FixtureRequest
) -> None:
    actuator, sock = _keep_actuator(actuator_factory, workloads, request)
    w = workloads.spawn()
    _notified(actuator, w)

    peers = [_as_nobody(TRICKLE, str(sock)), _as_nobody(FLOOD, str(sock), str(PER_UID * 10))]
    request.addfinalizer(lambda: [p.kill() for p in peers])
    flood = peers[1]
    assert flood.stdout is not None and flood.stdout.readline().strip() == "connected"
    time.sleep(0.3)  # the trickle is under way and the flood holds its connections

    started = time.monotonic()
    answer = request_keep(str(sock), w.pid, "keep", 3600, timeout=5)
    took = time.monotonic() - started
    assert answer["ok"], answer
    assert took < 1.0, f"the owner's keep took {took:.2f}s"
    assert actuator.case_for(w)["state"] == "snoozed"

    # The trickling peer is cut off at the whole-request deadline, not served forever.
    trickle = peers[0]
    out, _ = trickle.communicate(timeout=REQUEST_DEADLINE_S + 30)
    assert "cut off" in out or trickle.returncode != 0


@pytest.mark.reliability(56)
def test_a_keep_asked_before_any_case_is_honoured_when_a_case_opens(
    workloads, actuator_factory, request: pytest.FixtureRequest
) -> None:
    """An owner starting a long evaluation keeps it in advance: bounded by keep_max, listed,
    revocable, audited, honoured by the case that opens for that very process; another
    uid cannot keep it."""
    actuator, sock = _keep_actuator(
        actuator_factory, workloads, request, notifier={"keep_max": "4h"}
    )
    kept, revoked = workloads.spawn(), workloads.spawn(gpu=1)

    def keep(*args: str) -> subprocess.CompletedProcess[str]:
        return _keep(sock, *args)

    too_long = keep(str(kept.pid), "--for", "1d")
    assert too_long.returncode == 2 and "at most 4h" in too_long.stderr, too_long.stderr
    done = keep(str(kept.pid), "--for", "2h")
    assert done.returncode == 0 and "before any case" in done.stdout, done.stderr
    assert keep(str(revoked.pid), "--for", "2h").returncode == 0
    listed = keep("--list")
    assert f"PID {kept.pid} " in listed.stdout and f"PID {revoked.pid} " in listed.stdout
    assert keep(str(revoked.pid), "--revoke").returncode == 0
    assert f"PID {revoked.pid} " not in keep("--list").stdout
    stranger = _as_nobody(
        "import json, socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
        "s.sendall(json.dumps({'pid': int(sys.argv[2]), 'action': 'revoke'}).encode() + "
        "bytes([10])); print(s.makefile().readline())",
        str(sock),
        str(kept.pid),
    )
    out, _ = stranger.communicate(timeout=30)
    assert "is not yours" in out

    # The cases open: the kept process is snoozed at once, the revoked one is warned.
    assert actuator.post(payload(alert_for(kept), alert_for(revoked))).status_code == 200
    case = actuator.wait_state(kept, "snoozed", "notified", "refused", timeout=30)
    assert (case["state"], case["reason_code"]) == ("snoozed", "kept_ahead"), case
    other = actuator.wait_state(revoked, "notified", "snoozed", "refused", timeout=30)
    assert other["state"] == "notified", other
    assert kept.alive() and case["signals"] == []
    events = [
        r["event"]
        for r in map(json.loads, (actuator.workdir / "audit.jsonl").read_text().splitlines())
    ]
    assert events.count("keep_ahead") == 2 and events.count("keep_revoked") == 1


def test_keep_on_the_node_knows_the_caller_from_the_kernel(
    workloads, actuator_factory, request: pytest.FixtureRequest
) -> None:
    actuator, sock = _keep_actuator(actuator_factory, workloads, request)
    w = workloads.spawn()
    _notified(actuator, w)
    # Another uid (nobody) may not keep root's process: the kernel says who is asking.
    out, _ = _as_nobody(CLIENT, str(sock), str(w.pid), "keep").communicate(timeout=30)
    refused = json.loads(out)
    assert not refused["ok"] and "is not yours" in refused["error"]
    assert actuator.case_for(w)["state"] == "notified"
    # The owner (here root) keeps it with the command.
    done = _keep(sock, str(w.pid), "--for", "2h")
    assert done.returncode == 0, done.stderr
    assert f"process {w.pid} kept until" in done.stdout
    assert actuator.case_for(w)["state"] == "snoozed"
    events = [
        r
        for r in (
            json.loads(line) for line in (actuator.workdir / "audit.jsonl").read_text().splitlines()
        )
        if r.get("event") == "keep_socket"
    ]
    assert [(e["uid"], e["result"]) for e in events] == [
        (65534, "refused: not the owner"),
        (0, "accepted"),
    ]
    # The owner is done: --release ends the keep, and the case is judged again (warned first).
    done = _keep(sock, str(w.pid), "--release")
    assert done.returncode == 0 and "your keep ends now" in done.stdout, done.stderr
    assert actuator.case_for(w)["state"] in ("pending", "notified")


def test_an_owners_keep_is_bounded_by_the_rule_of_the_case(
    workloads, actuator_factory, request: pytest.FixtureRequest
) -> None:
    """The rule's [keep_min, keep_max] (here the defaults' 0s to 1h) bounds what the keep
    command may ask; the refusal names the bounds, changes nothing and is audited."""
    actuator, sock = _keep_actuator(
        actuator_factory, workloads, request, defaults={"keep_max": "1h"}
    )
    w = workloads.spawn()
    _notified(actuator, w)
    refused = _keep(sock, str(w.pid), "--for", "2h")
    assert refused.returncode == 2
    assert "rule defaults lets owners keep a process for 0s to 1h, not 2h" in refused.stderr
    assert actuator.case_for(w)["state"] == "notified"
    kept = _keep(sock, str(w.pid), "--for", "30m")
    assert kept.returncode == 0, kept.stderr
    assert actuator.case_for(w)["state"] == "snoozed"
    results = [
        r["result"]
        for r in (
            json.loads(line) for line in (actuator.workdir / "audit.jsonl").read_text().splitlines()
        )
        if r.get("event") == "keep_socket"
    ]
    assert results == [
        "refused: rule defaults lets owners keep a process for 0s to 1h, not 2h",
        "accepted",
    ]


# A flood that keeps its connections: each one the server cuts or refuses is opened again.
FLOOD_FOREVER = (
    "import socket, sys, time\n"
    "def connect():\n"
    "    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.setblocking(False)\n"
    "    return s\n"
    "held = [connect() for _ in range(int(sys.argv[2]))]\n"
    "print('connected', flush=True)\n"
    "end = time.monotonic() + 40\n"
    "while time.monotonic() < end:\n"
    "    for i, s in enumerate(held):\n"
    "        try:\n"
    "            s.recv(256)\n"
    "        except BlockingIOError:\n"
    "            continue\n"
    "        except OSError:\n"
    "            pass\n"
    "        s.close()\n"
    "        try: held[i] = connect()\n"
    "        except OSError: pass\n"
    "    time.sleep(0.05)\n"
)


def _as_uid(uid: int, code: str, *args: str) -> subprocess.Popen[str]:
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    return subprocess.Popen(
        [python, "-c", code, *args],
        user=uid,
        group=uid,
        extra_groups=[],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )


@pytest.mark.reliability(64)
def test_defect_9_a_flood_spread_over_many_uids_never_refuses_another_uids_keep(
    workloads, actuator_factory, request: pytest.FixtureRequest
) -> None:
    """Rootless containers give a user thousands of subordinate uids: 24 of them each hold
    PER_UID silent connections (96, past the cap of 64 for all uids together), reopening
    any that is cut. The owner's keep and a stranger's list are still answered at once."""
    actuator, sock = _keep_actuator(actuator_factory, workloads, request)
    w = workloads.spawn()
    _notified(actuator, w)
    floods = [_as_uid(200_000 + i, FLOOD_FOREVER, str(sock), str(PER_UID)) for i in range(24)]
    request.addfinalizer(lambda: [p.kill() for p in floods])
    for flood in floods:
        assert flood.stdout is not None and flood.stdout.readline().strip() == "connected"
    time.sleep(0.5)  # every flood holds its connections

    started = time.monotonic()
    answer = request_keep(str(sock), w.pid, "keep", 3600, timeout=10)
    took = time.monotonic() - started
    assert answer["ok"], answer  # not "busy"
    # Answered well before the floods' connections would be cut anyway (2 s each, then
    # reopened); 24 busy peers share this machine's cores with the actuator.
    assert took < 3.0, f"the owner's keep took {took:.2f}s"
    stranger = _as_nobody(CLIENT, str(sock), str(w.pid), "list")
    out, _ = stranger.communicate(timeout=10)
    assert "busy" not in out, out
    assert json.loads(out)["ok"] is True


def test_no_thread_to_be_had_refuses_one_request_and_serving_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When no thread can be started (many uids holding waits), that one connection is
    answered `busy`, its place is given back, and the socket keeps serving."""
    from actuator import keep_socket
    from tests.helpers.api import make_runtime

    sock = keep_socket.KeepSocket(make_runtime(tmp_path), str(tmp_path / "k.sock"), node="n")

    class NoThread:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    # This module's view of threading only (the real module stays as it is).
    monkeypatch.setattr(keep_socket, "threading", types.SimpleNamespace(Thread=NoThread))
    mine, theirs = socket.socketpair(socket.AF_UNIX)
    with mine, theirs:
        sock._dispatch(theirs)
        assert b"busy: no thread free" in mine.recv(4096)
    assert sock._active == {} and sock._peers == set()


def test_keep_list_shows_keeps_on_open_cases_and_filters_by_pid(
    workloads, actuator_factory, request: pytest.FixtureRequest
) -> None:
    """Issue 60: `keep --list` showed only keeps asked in advance, and `keep PID --list`
    ignored the PID. A case kept by its owner is listed with its case number; a PID given
    with --list shows that process's keeps only."""
    actuator, sock = _keep_actuator(actuator_factory, workloads, request)
    flagged, ahead = workloads.spawn(), workloads.spawn(gpu=1)
    _notified(actuator, flagged)
    assert _keep(sock, str(flagged.pid), "--for", "2h").returncode == 0
    assert _keep(sock, str(ahead.pid), "--for", "1h").returncode == 0
    case = actuator.case_for(flagged)
    listed = _keep(sock, "--list")
    assert listed.returncode == 0, listed.stderr
    assert f"case {case['id']}: PID {flagged.pid} " in listed.stdout, listed.stdout
    assert f"in advance: PID {ahead.pid} " in listed.stdout
    one = _keep(sock, str(ahead.pid), "--list").stdout
    assert f"PID {ahead.pid} " in one and f"PID {flagged.pid} " not in one
    assert "no keeps on this node for process 999999" in _keep(sock, "999999", "--list").stdout
