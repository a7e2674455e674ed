"""The actuator's side of the agent protocol (actuator/fleet/remote.py) against a loopback
server that answers as a scripted agent would: an answer is believed only when it is JSON,
a 200, from the node it should be, with the agent's clock; anything else is the node being
unreachable (unknown, never idle); a silent node fails fast for a while; a signal step is
retried under the same key; the node's readings are moved onto this actuator's clock."""

from __future__ import annotations

import http.server
import json
import signal
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import urllib3

from actuator.fleet import wire
from actuator.fleet.remote import ClientTls, RemoteNode, rebase
from actuator.models import LiveState, Member, Target
from actuator.node import NodeUnreachable
from actuator.rehearsal import Rehearsal

NODE = "node-b"
_SERVERS: dict[str, http.server.ThreadingHTTPServer] = {}  # by URL, for a test to wrap in TLS
TARGET = Target(NODE, 4242, 1000, "boot", "GPU-a", 1.7e9)


@dataclass
class _Script:
    answers: list[tuple[int, bytes]] = field(default_factory=list)  # then the last, forever
    seen: list[tuple[str, str, Any]] = field(default_factory=list)


def _agent(payload: dict[str, Any], *, node: str = NODE, now: Any = 1000.0) -> bytes:
    return json.dumps({"node": node, "now": now, **payload}).encode()


@pytest.fixture
def script() -> Iterator[tuple[_Script, str]]:
    state = _Script()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            state.seen.append((self.command, self.path, body))
            code, data = state.answers.pop(0) if len(state.answers) > 1 else state.answers[0]
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    _SERVERS[url] = httpd
    yield state, url
    _SERVERS.pop(url, None)
    httpd.shutdown()
    httpd.server_close()


class _PlainHttp:
    """The TLS settings' one duty here: a pool (plain, on loopback; mTLS: test_fleet)."""

    def pool(self) -> urllib3.PoolManager:
        return urllib3.PoolManager()


def _node(url: str) -> RemoteNode:
    return RemoteNode(NODE, url, _PlainHttp(), timeout=2, clock=lambda: 1010.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ((200, b"<html>a proxy</html>"), "not JSON"),
        ((500, _agent({"error": "NVML is not answering"})), "HTTP 500: NVML is not answering"),
        ((200, _agent({}, node="node-a")), "serves node 'node-a', not 'node-b'"),
        ((200, _agent({}, now="soon")), "no clock reading"),
        ((200, _agent({}, now=True)), "no clock reading"),
        ((200, _agent({"live": {"exists": "maybe"}})), "malformed live state"),
    ],
)
def test_an_answer_is_believed_only_from_the_right_agent(
    script: tuple[_Script, str], answer: tuple[int, bytes], why: str
) -> None:
    state, url = script
    state.answers = [answer]
    with pytest.raises(NodeUnreachable, match=why.replace("(", r"\(")):
        _node(url).inspect(TARGET)


def test_a_node_that_failed_fails_fast_for_a_while(script: tuple[_Script, str]) -> None:
    state, url = script
    state.answers = [(503, _agent({"error": "restarting"}))]
    node = _node(url)
    with pytest.raises(NodeUnreachable, match="restarting"):
        node.inspect(TARGET)
    with pytest.raises(NodeUnreachable, match="not retried for 4s"):
        node.inspect(TARGET)
    assert len(state.seen) == 1  # the second call never reached the agent
    assert node.monitored_count() is None and node.gpu_processes("GPU-a") is None  # unknown


def test_the_node_s_readings_are_moved_onto_this_clock(script: tuple[_Script, str]) -> None:
    state, url = script
    live = {"sampled_at": 990.0, "exists": True, "log_mtime": 900.0, "start_time": 100.0}
    state.answers = [(200, _agent({"live": live}))]
    seen = _node(url).inspect(TARGET)
    # The agent's clock read 1000 when ours read 1010: its readings are 10 s behind ours.
    assert (seen.sampled_at, seen.log_mtime, seen.start_time) == (1000.0, 910.0, 110.0)
    assert seen.heartbeat is None and seen.clock_offset == 10.0
    assert state.seen[0][:2] == ("POST", "/v1/inspect")


def test_re_checks_are_asked_together_in_chunks_and_one_by_one_from_an_older_agent(
    script: tuple[_Script, str],
) -> None:
    state, url = script
    live = {"sampled_at": 990.0, "exists": False}
    many = wire.MAX_INSPECT + 2
    state.answers = [
        (200, _agent({"lives": [live] * wire.MAX_INSPECT})),
        (200, _agent({"lives": [live] * 2})),
    ]
    node = _node(url)
    seen = node.inspect_many([TARGET] * many)
    assert len(seen) == many and {s.sampled_at for s in seen} == {1000.0}  # rebased
    assert [(m, p, len(b["targets"])) for m, p, b in state.seen] == [
        ("POST", "/v1/inspect-many", wire.MAX_INSPECT),
        ("POST", "/v1/inspect-many", 2),
    ]
    # An answer with a state missing is no answer: no case is judged on a shifted list.
    state.answers, state.seen = [(200, _agent({"lives": [live]}))], []
    with pytest.raises(NodeUnreachable, match="expected 2 live states"):
        _node(url).inspect_many([TARGET, TARGET])
    # An agent older than this actuator has no such path: asked one by one, and not down.
    state.answers = [(404, _agent({"error": "not found"})), (200, _agent({"live": live}))]
    state.seen = []
    older = _node(url)
    assert len(older.inspect_many([TARGET, TARGET])) == 2
    assert len(older.inspect_many([TARGET])) == 1
    assert [p for _, p, _ in state.seen] == ["/v1/inspect-many"] + ["/v1/inspect"] * 3


def test_after_an_older_agent_s_404_the_batch_is_tried_again_later(
    script: tuple[_Script, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent upgraded since its 404 serves the batch again: asked after a while, not
    never again until this actuator restarts."""
    monkeypatch.setattr("actuator.fleet.remote.UNSERVED_RETRY", 0.2)
    state, url = script
    live = {"sampled_at": 990.0, "exists": False}
    state.answers = [
        (404, _agent({"error": "not found"})),
        (200, _agent({"live": live})),
        (200, _agent({"live": live})),
        (200, _agent({"lives": [live] * 2})),
    ]
    node = _node(url)
    assert len(node.inspect_many([TARGET, TARGET])) == 2
    time.sleep(0.3)
    assert len(node.inspect_many([TARGET, TARGET])) == 2
    paths = [p for _, p, _ in state.seen]
    assert paths == ["/v1/inspect-many", "/v1/inspect", "/v1/inspect", "/v1/inspect-many"]


def test_rehearsals_are_sent_together_in_chunks_and_one_by_one_to_an_older_agent(
    script: tuple[_Script, str],
) -> None:
    state, url = script
    dry = [{"pid": 4242, "signal": "SIGTERM", "sent": False, "detail": "dry run"}]
    step = Rehearsal(TARGET, (Member(4242, 1000, 0),), "SIGTERM", key="case-7")
    many = wire.MAX_INSPECT + 1
    state.answers = [
        (200, _agent({"results": [dry] * wire.MAX_INSPECT})),
        (200, _agent({"results": [dry]})),
    ]
    answers = _node(url).rehearse_many([step] * many)
    assert len(answers) == many and {a[0].detail for a in answers} == {"dry run"}
    assert [(p, len(b["steps"])) for _, p, b in state.seen] == [
        ("/v1/rehearse", wire.MAX_INSPECT),
        ("/v1/rehearse", 1),
    ]
    assert state.seen[0][2]["steps"][0]["signal"] == "SIGTERM"
    # One list of results short is no answer.
    state.answers, state.seen = [(200, _agent({"results": [dry]}))], []
    with pytest.raises(NodeUnreachable, match="expected 2 result lists"):
        _node(url).rehearse_many([step, step])
    # An older agent: each a dry-run signal step under its case's key.
    state.answers = [
        (404, _agent({"error": "not found"})),
        (200, _agent({"results": dry, "replayed": False})),
    ]
    state.seen = []
    assert len(_node(url).rehearse_many([step, step])) == 2
    assert [p for _, p, _ in state.seen] == ["/v1/rehearse", "/v1/signal", "/v1/signal"]
    sent = state.seen[1][2]
    assert sent["dry_run"] is True and sent["key"] == "case-7"


def test_lists_that_make_no_sense_are_unknown(script: tuple[_Script, str]) -> None:
    state, url = script
    state.answers = [(200, _agent({"processes": {"12": "lots"}, "count": True}))]
    node = _node(url)
    assert node.gpu_processes("GPU-a/../x") is None
    assert state.seen[-1][1] == "/v1/gpus/GPU-a%2F..%2Fx/processes"  # one path segment
    assert node.monitored_count() is None
    state.answers = [(200, _agent({"processes": {"12": 4096}, "count": 3}))]
    assert node.gpu_processes("GPU-a") == {12: 4096} and node.monitored_count() == 3


def test_a_signal_step_is_retried_under_the_same_key(script: tuple[_Script, str]) -> None:
    state, url = script
    sent = {"pid": 4242, "signal": "SIGTERM", "sent": True, "detail": ""}
    state.answers = [(502, b"bad gateway"), (200, _agent({"results": [sent]}))]
    member = Member(4242, 1000, 1001)
    results = _node(url).signal_tree(TARGET, [member], signal.SIGTERM, dry_run=False, key="c7:t")
    assert [r.sent for r in results] == [True]
    keys = [body["key"] for _, path, body in state.seen if path == "/v1/signal"]
    assert keys == ["c7:t", "c7:t"]


def test_a_step_the_agent_never_confirms_is_reported_not_sent(
    script: tuple[_Script, str],
) -> None:
    state, url = script
    state.answers = [(503, _agent({"error": "busy"}))]
    member = Member(4242, 1000, 1001)
    results = _node(url).signal_tree(TARGET, [member], signal.SIGKILL, dry_run=False, key="c7:k")
    assert [(r.pid, r.sent) for r in results] == [(4242, False)]
    assert results[0].detail.startswith("not sent: ") and "busy" in results[0].detail


def test_a_checkpoint_call_is_keyed_and_an_unconfirmed_one_is_not_ok(
    script: tuple[_Script, str],
) -> None:
    state, url = script
    state.answers = [(200, _agent({"ok": True, "state": "checkpointed", "detail": "done"}))]
    done = _node(url).suspend(TARGET, 5.0, key="case-7-3")
    assert (done.ok, done.state) == (True, "checkpointed")
    assert state.seen[-1][1:] == (
        "/v1/checkpoint",
        {"key": "case-7-3", "target": state.seen[-1][2]["target"], "call": "suspend",
         "lock_timeout": 5.0, "need_bytes": None, "avoid": []},
    )  # fmt: skip
    state.answers = [(503, _agent({"error": "busy"}))]
    lost = _node(url).resume(TARGET, need=4 << 30, avoid=("GPU-b",), key="case-7-9")
    assert lost.ok is False and lost.detail.startswith("not confirmed: ")
    assert lost.no_room is False  # unconfirmed is not "no room": the next re-check judges
    sent = state.seen[-1][2]
    assert (sent["need_bytes"], sent["avoid"]) == (4 << 30, ["GPU-b"])  # the agent places it
    answer = {"ok": False, "state": "checkpointed", "detail": "no room on GPU 0", "no_room": True}
    state.answers = [(200, _agent(answer))]
    waiting = _node(url).resume(TARGET, need=4 << 30, key="case-7-10")
    assert (waiting.ok, waiting.no_room, waiting.detail) == (False, True, "no room on GPU 0")
    for said, onto in (("GPU-1a2b-3c4d", "GPU-1a2b-3c4d"), ("../GPU-1", ""), (7, "")):
        answer = {"ok": True, "state": "running", "detail": "restored", "onto": said}
        state.answers = [(200, _agent(answer))]
        moved = _node(url).resume(TARGET, need=4 << 30, key=f"case-7-{onto or 'x'}")
        assert moved.onto == onto  # only a plain GPU UUID moves the case's target


def test_rebase_leaves_unknown_readings_unknown() -> None:
    live = LiveState(sampled_at=5.0, exists=True)
    moved = rebase(live, -2.5)
    assert (moved.sampled_at, moved.log_mtime, moved.heartbeat, moved.start_time) == (
        2.5,
        None,
        None,
        None,
    )


@pytest.mark.parametrize("signed_by_the_fleet", [True, False])
def test_only_an_agent_the_fleet_ca_signed_is_believed(
    script: tuple[_Script, str], tmp_path: Path, signed_by_the_fleet: bool
) -> None:
    """An impostor on the agent's address, with a certificate the fleet's CA did not sign,
    is unreachable (the request is never sent to it); the agent's own certificate works."""
    from tests.helpers.certs import self_signed
    from tests.helpers.fleet import client_tls, make_certs

    state, url = script
    fleet = make_certs(tmp_path / "fleet", [NODE])
    if signed_by_the_fleet:
        key, cert = fleet / f"agent-{NODE}.key", fleet / f"agent-{NODE}.pem"
    else:
        key, cert = self_signed(tmp_path)
    server = _SERVERS[url]
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    state.answers = [(200, _agent({"live": {"sampled_at": 990.0, "exists": True}}))]
    node = RemoteNode(
        NODE, url.replace("http://", "https://"), ClientTls(**client_tls(fleet)), timeout=2
    )
    if signed_by_the_fleet:
        assert node.inspect(TARGET).exists is True
        assert [s[:2] for s in state.seen] == [("POST", "/v1/inspect")]
    else:
        with pytest.raises(NodeUnreachable, match="certificate verify failed"):
            node.inspect(TARGET)
        assert state.seen == []
