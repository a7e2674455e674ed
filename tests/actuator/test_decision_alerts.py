"""The actuator's own alerts through a real Alertmanager running the reference config (its
timings rescaled, chat pointed at a local receiver): decisions reach chat, each once per
case, with the labels SREs route on; the breaker alert resolves when the breaker closes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from actuator.decision_alerts import DecisionAlerts
from actuator.demo.ruleset import render_deploy
from actuator.models import State
from actuator.notifications.notice import Notice, ProvenFacts
from tests.helpers.cases import make_case
from tests.helpers.prom import Server, start_alertmanager
from tests.support import REPO, wait_until


class Chat:
    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []

    def alerts(self, status: str = "firing") -> list[dict[str, Any]]:
        return [a for p in self.posts for a in p["alerts"] if a["status"] == status]


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Chat]]:
    chat = Chat()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            chat.posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    work = tmp_path_factory.mktemp("am")
    token = work / "token"
    token.write_text("decision-alerts-token-0123456789\n")
    render_deploy(
        REPO,
        work / "run",
        scale=1 / 30,
        chat_url=f"http://127.0.0.1:{server.server_address[1]}/chat",
        token_file=token,
    )
    try:
        with start_alertmanager(work / "run" / "deploy" / "alertmanager.yml", work) as am:
            yield am, chat
    finally:
        server.shutdown()


@pytest.mark.reliability(47, 48)
def test_decisions_reach_chat_with_the_labels_sres_route_on(routed) -> None:
    am, chat = routed
    alerts = DecisionAlerts(
        [am.url],
        external_url="https://reclaimer.example.com",
        runbook_url="https://wiki.example.com/gpu-reclaimer",
        clock=time.time,
    )
    # The alert's labels claim another command, GPU and project: the node's facts win.
    facts = ProvenFacts(
        node="n",
        pid=4242,
        gpu_uuid="GPU-2",
        gpu_index=2,
        user="lilei",
        project="vision",
        program="python train\u202e.py\n<!channel>",
    )
    case = make_case(
        id=7,
        state=State.NOTIFIED,
        user="lilei",
        project="vision",
        labels={"command": "forged", "gpu": "9", "project": "other"},
        facts=facts.to_json(),
        freed_bytes=8 << 30,
    )
    deadline = time.time() + 600
    notice = Notice(
        kind="warning",
        case=7,
        facts=facts,
        alertname="GpuProcessIdle",
        since=deadline - 900,
        deadline=deadline,
        term_timeout=10,
        grace=600,
    )
    assert alerts.scheduled(notice, case)
    assert alerts.reclaimed(case)
    wait_until(
        lambda: (
            {a["labels"]["alertname"] for a in chat.alerts()}
            >= {"GpuReclaimScheduled", "GpuProcessReclaimed"}
        ),
        20,
    )
    (scheduled,) = [a for a in chat.alerts() if a["labels"]["alertname"] == "GpuReclaimScheduled"]
    assert scheduled["labels"] | {"alertname": "x"} == {
        "alertname": "x",
        "severity": "info",
        "node": "n",
        "gpu": "2",
        "user": "lilei",
        "project": "vision",
        "case": "7",
        "pid": "4242",
        "case_url": "https://reclaimer.example.com/api/v1/cases/7",
    }
    assert scheduled["annotations"]["runbook_url"] == "https://wiki.example.com/gpu-reclaimer"
    summary = scheduled["annotations"]["summary"]
    # one line, no bidi override, no live mention for the chat template downstream
    assert "python train.py \u2039!channel\u203a (PID 4242) on n GPU 2" in summary
    (reclaimed,) = [a for a in chat.alerts() if a["labels"]["alertname"] == "GpuProcessReclaimed"]
    assert "8.0 GiB freed" in reclaimed["annotations"]["summary"]


def test_the_breaker_alert_fires_while_open_and_resolves_on_reset(routed) -> None:
    am, chat = routed
    alerts = DecisionAlerts([am.url], clock=time.time)
    alerts.breaker(True, "5 of 6 processes flagged at once", mono=100.0)
    alerts.breaker(True, "still", mono=110.0)  # within the resend interval: nothing sent
    wait_until(
        lambda: [
            a for a in chat.alerts() if a["labels"]["alertname"] == "GpuReclaimerCircuitBreakerOpen"
        ],
        20,
    )
    alerts.breaker(False, "", mono=120.0)
    wait_until(
        lambda: [
            a
            for a in chat.alerts("resolved")
            if a["labels"]["alertname"] == "GpuReclaimerCircuitBreakerOpen"
        ],
        20,
    )
    alerts.breaker(False, "", mono=130.0)  # closed and already resolved: nothing more


def test_an_unreachable_alertmanager_is_counted_not_raised() -> None:
    alerts = DecisionAlerts(["http://127.0.0.1:9"], clock=time.time, timeout=1)
    case = make_case(id=8)
    assert not alerts.failed(case) and alerts.failures == 1


def test_a_passs_decision_alerts_leave_as_one_post() -> None:
    """Inside a reconciler pass (`batched`), the alerts of many decisions, from several
    threads, reach Alertmanager as one list in one POST; outside, each is posted at once."""
    posts: list[list[dict[str, Any]]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            posts.append(json.loads(body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        alerts = DecisionAlerts([f"http://127.0.0.1:{server.server_port}"], clock=time.time)
        with alerts.batched():
            workers = [
                threading.Thread(target=alerts.reclaimed, args=(make_case(id=i),))
                for i in range(1, 11)
            ]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            assert posts == []  # nothing leaves before the pass ends
        assert len(posts) == 1 and sorted(int(a["labels"]["case"]) for a in posts[0]) == list(
            range(1, 11)
        )
        assert alerts.failed(make_case(id=11))  # outside a pass: at once
        assert len(posts) == 2 and posts[1][0]["labels"]["alertname"] == "GpuReclaimFailed"
    finally:
        server.shutdown()
