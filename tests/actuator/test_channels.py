"""Every channel against a real receiver: mail through a real SMTP server (aiosmtpd) over
STARTTLS with AUTH, parsed back; each chat robot against a local receiver that checks the
service's documented format and signature and answers as the service does."""

from __future__ import annotations

import dataclasses
import email
import email.policy
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from actuator.notifications.channels import (
    DingTalkChannel,
    EmailChannel,
    FeishuChannel,
    SlackChannel,
    WeComChannel,
)
from actuator.notifications.messages import Renderer
from tests.helpers.notices import BOB, LILEI, NOW, notice
from tests.helpers.robots import robot
from tests.support import free_port


@dataclass
class Inbox:
    messages: list[email.message.EmailMessage] = field(default_factory=list)
    envelopes: list[Any] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append(parsed)  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


def _authenticator(
    server: Any, session: Any, envelope: Any, mechanism: str, data: Any
) -> AuthResult:
    ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
        b"reclaimer",
        b"s3cret",
    )
    return AuthResult(success=ok, handled=False)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    from tests.helpers.certs import self_signed

    return self_signed(tmp_path)


@pytest.fixture
def smtp_server(certificate: tuple[Path, Path]) -> Iterator[tuple[Inbox, int, Path]]:
    import ssl

    key, cert = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    inbox = Inbox()
    port = free_port()
    controller = Controller(
        inbox,
        hostname="127.0.0.1",
        port=port,
        tls_context=context,
        require_starttls=True,
        authenticator=_authenticator,
        auth_require_tls=True,
    )
    controller.start()
    try:
        yield inbox, port, cert
    finally:
        controller.stop()


def test_mail_goes_over_starttls_with_auth_as_text_and_html(smtp_server) -> None:
    inbox, port, cert = smtp_server
    channel = EmailChannel(
        "127.0.0.1",
        port,
        "gpu-reclaimer@example.com",
        security="starttls",
        username="reclaimer",
        password="s3cret",
        ca_file=str(cert),
    )
    message = Renderer().render(notice(), LILEI, NOW)
    result = channel.send(message, LILEI)
    assert result.delivered, result.detail
    (mail,) = inbox.messages
    assert inbox.envelopes[0].rcpt_tos == ["lilei@example.com"]
    assert mail["Subject"] == message.subject and mail["Content-Language"] == "zh-CN"
    assert mail.get_content_type() == "multipart/alternative"
    plain = mail.get_body(("plain",)).get_content()
    html = mail.get_body(("html",)).get_content()
    assert "是否仍在进行" in plain and "**" not in plain
    assert "<strong>" in html and "31337" in html


def test_a_long_chinese_subject_keeps_every_space_through_smtp() -> None:
    """Python's own header folding dropped the space where it split encoded words: a
    subject read "（PID12226）". Every split point is tried; each encoded word stays within
    RFC 2047's 75 characters."""
    import email
    import io
    from email.generator import BytesGenerator

    channel = EmailChannel("127.0.0.1", 25, "gpu-reclaimer@example.com", security="none")
    base = Renderer().render(notice(), LILEI, NOW)
    for pad in range(40):
        subject = f"[GPU 回收] {'n' * pad} GPU  上的 yolo（PID 12226）将于 2026-12-01 21:44 被回收"
        mail = channel.compose(dataclasses.replace(base, subject=subject), LILEI)
        out = io.BytesIO()  # as smtplib.send_message writes it
        BytesGenerator(out, policy=mail.policy.clone(linesep="\r\n")).flatten(mail)
        raw = out.getvalue()
        assert email.message_from_bytes(raw, policy=email.policy.default)["Subject"] == subject
        assert all(len(w) <= 75 for w in re.findall(rb"=\?utf-8\?b\?[^?]*\?=", raw))


def test_mail_with_a_wrong_password_or_an_untrusted_certificate_is_not_delivered(
    smtp_server, tmp_path: Path
) -> None:
    inbox, port, cert = smtp_server
    message = Renderer().render(notice(), LILEI, NOW)
    wrong = EmailChannel(
        "127.0.0.1",
        port,
        "r@example.com",
        username="reclaimer",
        password="guess",
        ca_file=str(cert),
    ).send(message, LILEI)
    assert not wrong.delivered and "SMTPAuthenticationError" in wrong.detail
    untrusted = EmailChannel(
        "127.0.0.1", port, "r@example.com", username="reclaimer", password="s3cret"
    ).send(message, LILEI)
    assert not untrusted.delivered and "CERTIFICATE_VERIFY_FAILED" in untrusted.detail
    assert not inbox.messages


def test_wecom_gets_markdown_that_mentions_the_owner() -> None:
    message = Renderer().render(notice(), LILEI, NOW)
    with robot("wecom") as wecom:
        assert WeComChannel(wecom.url).send(message, LILEI).delivered, wecom.refused
        (body,) = wecom.received
    content = body["markdown"]["content"]
    assert content.startswith(f"**{message.subject_markdown}**") and content.endswith("<@lilei>")
    long = Renderer().render(notice(program="x" * 5000), LILEI, NOW)
    with robot("wecom") as wecom:  # cut to the robot's 4096 bytes, the mention kept
        assert WeComChannel(wecom.url).send(long, LILEI).delivered, wecom.refused
        assert wecom.received[0]["markdown"]["content"].endswith("<@lilei>")


@pytest.mark.parametrize("secret", [None, "SECdingtalk-secret"])
def test_dingtalk_signed_and_unsigned(secret: str | None) -> None:
    message = Renderer().render(notice(), LILEI, NOW)
    with robot("dingtalk", secret) as ding:
        result = DingTalkChannel(ding.url, secret=secret).send(message, LILEI)
        assert result.delivered, (result.detail, ding.refused)
        (body,) = ding.received
    assert body["at"] == {"atUserIds": ["lilei-dt"], "isAtAll": False}
    assert body["markdown"]["title"] == message.subject
    assert body["markdown"]["text"].endswith("@lilei-dt")


def test_dingtalk_and_feishu_refuse_a_wrong_secret_and_it_is_not_delivered() -> None:
    message = Renderer().render(notice(), LILEI, NOW)
    with robot("dingtalk", "right") as ding:
        result = DingTalkChannel(ding.url, secret="wrong").send(message, LILEI)
        assert not result.delivered and "310000" in result.detail
    with robot("feishu", "right") as feishu:
        result = FeishuChannel(feishu.url, secret="wrong").send(message, LILEI)
        assert not result.delivered and "19021" in result.detail
    with robot("feishu", "right") as feishu:  # a clock an hour off: stale timestamp
        late = FeishuChannel(feishu.url, secret="right", clock=lambda: time.time() - 7200)
        assert not late.send(message, LILEI).delivered


@pytest.mark.parametrize("secret", [None, "feishu-secret"])
def test_feishu_gets_a_post_with_the_owner_mentioned(secret: str | None) -> None:
    message = Renderer().render(notice(), LILEI, NOW)
    with robot("feishu", secret) as feishu:
        result = FeishuChannel(feishu.url, secret=secret).send(message, LILEI)
        assert result.delivered, (result.detail, feishu.refused)
        (body,) = feishu.received
    post = body["content"]["post"]["zh_cn"]
    assert post["title"] == message.subject
    assert post["content"][0] == [{"tag": "at", "user_id": "ou_lilei"}]
    assert any("是否仍在进行" in line[0]["text"] for line in post["content"][1:])


def test_slack_gets_block_kit_with_the_owner_mentioned() -> None:
    message = Renderer().render(notice(user="bob"), BOB, NOW)
    with robot("slack") as slack:
        assert SlackChannel(slack.url).send(message, BOB).delivered, slack.refused
        (body,) = slack.received
    header, section = body["blocks"]
    assert header["text"]["text"] == message.subject[:150]
    assert section["text"]["text"].startswith("<@U024BOB> *Hello Bob,*")
    assert body["text"] == message.subject_slack


@pytest.mark.parametrize("answer", [b"[0]", b'"ok"', b"null", b"\xff not even text"])
def test_a_robot_answer_that_is_not_a_json_object_is_not_delivered(answer: bytes) -> None:
    """A relay in front of the robot that answers something else: not delivered, said why,
    and the channel does not raise (a list's .get() once did)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Relay(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/robot?key=k"
    message = Renderer().render(notice(), LILEI, NOW)
    try:
        for channel in (WeComChannel(url), DingTalkChannel(url), FeishuChannel(url)):
            result = channel.send(message, LILEI)
            assert not result.delivered and "JSON" in result.detail, (channel.name, result)
    finally:
        server.shutdown()
        server.server_close()
