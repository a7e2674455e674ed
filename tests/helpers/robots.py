"""Local receivers for the chat robots' webhook URLs: each checks a request against that
service's documented message format and signature and answers as the service does, so a
wrong payload or signature fails the way it would in production.

- WeCom group robot: POST ?key=..., {"msgtype": "markdown", "markdown": {"content"}} (content
  at most 4096 bytes); answers {"errcode": 0, "errmsg": "ok"}, or 93000 / 40058.
- DingTalk robot: POST ?access_token=...[&timestamp=<ms>&sign=<urlencoded base64 HMAC-SHA256
  of "timestamp\\nsecret" keyed by the secret>], msgtype markdown needs title and text,
  `at.atUserIds`; answers errcode 0, or 310000 "sign not match" / 300001.
- Feishu/Lark bot: POST {"timestamp", "sign" (base64 HMAC-SHA256 keyed by
  "timestamp\\nsecret", of an empty message), "msg_type": "post", "content": {"post":
  {locale: {"title", "content": [[{"tag": ...}]]}}}}; answers {"code": 0}, or 19021.
- Slack incoming webhook: {"text", "blocks"}; header text <= 150, section text <= 3000;
  answers 200 "ok", or 400 "invalid_blocks".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FEISHU_TAGS = {"text", "a", "at", "img"}


@dataclass
class Robot:
    service: str  # wecom | dingtalk | feishu | slack
    secret: str | None = None
    received: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    url: str = ""

    def answer(self, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        check = getattr(self, f"_{self.service}")
        status, reply, problem = check(query, body)
        if problem:
            self.refused.append(problem)
        else:
            self.received.append(body)
        return status, reply

    def _wecom(self, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, str]:
        if not query.get("key"):
            return 200, {"errcode": 93000, "errmsg": "invalid webhook url"}, "no key"
        content = (
            body.get("markdown", {}).get("content") if body.get("msgtype") == "markdown" else None
        )
        if not isinstance(content, str) or not content:
            return 200, {"errcode": 40008, "errmsg": "invalid message type"}, "not markdown"
        if len(content.encode()) > 4096:
            return 200, {"errcode": 40058, "errmsg": "content exceed max length 4096"}, "long"
        return 200, {"errcode": 0, "errmsg": "ok"}, ""

    def _dingtalk(self, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, str]:
        if not query.get("access_token"):
            return 200, {"errcode": 300001, "errmsg": "token is not exist"}, "no token"
        if self.secret:
            ts = query.get("timestamp", "")
            expected = base64.b64encode(
                hmac.new(
                    self.secret.encode(), f"{ts}\n{self.secret}".encode(), hashlib.sha256
                ).digest()
            ).decode()
            fresh = ts.isdigit() and abs(time.time() * 1000 - int(ts)) < 3600_000
            if not fresh or query.get("sign") != expected:
                return 200, {"errcode": 310000, "errmsg": "sign not match"}, "bad sign"
        md = body.get("markdown", {})
        if body.get("msgtype") != "markdown" or not md.get("title") or not md.get("text"):
            return 200, {"errcode": 40035, "errmsg": "missing title or text"}, "bad markdown"
        if not isinstance(body.get("at", {}).get("atUserIds", []), list):
            return 200, {"errcode": 40035, "errmsg": "at.atUserIds must be a list"}, "bad at"
        return 200, {"errcode": 0, "errmsg": "ok"}, ""

    def _feishu(self, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, str]:
        if self.secret:
            ts = str(body.get("timestamp", ""))
            key = f"{ts}\n{self.secret}".encode()
            expected = base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
            fresh = ts.isdigit() and abs(time.time() - int(ts)) < 3600
            if not fresh or body.get("sign") != expected:
                return (
                    200,
                    {
                        "code": 19021,
                        "msg": "sign match fail or timestamp is not within "
                        "one hour from current time",
                    },
                    "bad sign",
                )
        posts = body.get("content", {}).get("post", {}) if body.get("msg_type") == "post" else {}
        if not posts:
            return 200, {"code": 19002, "msg": "params error, msg_type need"}, "not post"
        for locale in posts.values():
            lines = locale.get("content")
            ok = isinstance(lines, list) and all(
                isinstance(line, list) and all(e.get("tag") in FEISHU_TAGS for e in line)
                for line in lines
            )
            if not ok or not isinstance(locale.get("title"), str):
                return 200, {"code": 19002, "msg": "params error"}, "bad post content"
        return 200, {"code": 0, "msg": "success", "data": {}}, ""

    def _slack(self, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, str]:
        blocks = body.get("blocks", [])
        if not body.get("text") and not blocks:
            return 400, "no_text", "no text"
        for block in blocks:
            text = block.get("text", {})
            limit = {"header": 150, "section": 3000}.get(block.get("type"))
            if (
                limit is None
                or len(text.get("text", "")) > limit
                or (block["type"] == "header" and text.get("type") != "plain_text")
            ):
                return 400, "invalid_blocks", f"bad block {block.get('type')}"
        return 200, "ok", ""


@contextmanager
def robot(service: str, secret: str | None = None) -> Iterator[Robot]:
    """A receiver on a loopback port; `robot.url` is the URL an admin would paste."""
    state = Robot(service, secret)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            parsed = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(parsed.query))
            length = int(self.headers.get("Content-Length", 0))
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError:
                body = {}
            status, reply = state.answer(query, body)
            data = reply.encode() if isinstance(reply, str) else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header(
                "Content-Type", "text/plain" if isinstance(reply, str) else "application/json"
            )
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    paths = {
        "wecom": "/cgi-bin/webhook/send?key=test-key",
        "dingtalk": "/robot/send?access_token=test-token",
        "feishu": "/open-apis/bot/v2/hook/test-hook",
        "slack": "/services/T000/B000/XXXX",
    }
    state.url = f"http://127.0.0.1:{port}{paths[service]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
