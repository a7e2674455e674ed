"""Where a notice goes: email over SMTP and the chat robots an admin creates in WeCom,
DingTalk, Feishu/Lark and Slack (the robot URL pasted from the service). Each channel turns
a rendered message into that service's documented request, sends it with a bounded timeout
and reads the service's own success answer; a channel never raises, it returns a result.

Libraries: `smtplib`/`email` (standard library: STARTTLS, implicit TLS, AUTH, multipart) and
urllib3 (`actuator/endpoints.py`). A notification aggregator (apprise) would hide the exact
payloads and signing this module must get right and that the tests check against each
service's format.
"""

from __future__ import annotations

import base64
import email.policy
import hashlib
import hmac
import logging
import smtplib
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from email.header import Header
from email.message import EmailMessage
from email.utils import formataddr, make_msgid
from typing import Any, Protocol

from actuator.endpoints import Answer, Endpoint, EndpointError
from actuator.notifications import untrusted
from actuator.notifications.messages import Message
from actuator.notifications.owners import Contact

log = logging.getLogger(__name__)
TIMEOUT = 5.0


@dataclass(frozen=True)
class Delivery:
    delivered: bool
    detail: str


class Channel(Protocol):
    name: str

    def send(self, message: Message, contact: Contact) -> Delivery: ...


def _post_json(
    endpoint: Endpoint, url: str, body: dict[str, Any], timeout: float, ok: Any
) -> Delivery:
    """POST `body`; delivered only when the service's answer says so (`ok(answer)`)."""
    try:
        answer = endpoint.post_json(url, body, timeout=timeout)
    except EndpointError as exc:
        return Delivery(False, str(exc))
    if answer.status >= 300:
        return Delivery(False, f"HTTP {answer.status}: {answer.text[:200]}")
    verdict = ok(answer)
    return Delivery(verdict is True, "ok" if verdict is True else str(verdict))


def _errcode(answer: Answer, key: str = "errcode", message: str = "errmsg") -> Any:
    try:
        said = answer.json()
    except ValueError:
        return f"not JSON: {answer.text[:200]}"
    if not isinstance(said, dict):
        return f"not a JSON object: {answer.text[:200]}"
    if said.get(key) == 0:
        return True
    return f"{key} {said.get(key)}: {said.get(message)}"


# Python's header folder (3.11) drops the space where it splits a subject into encoded
# words ("PID 123" arrived as "PID123" in Chinese subjects). The Subject is encoded by
# email.header instead, which splits within RFC 2047's 75 characters and keeps every
# space, and kept as encoded (refold_source none applies only to headers set raw).
_MAIL_POLICY = email.policy.SMTP.clone(refold_source="none")


def encoded_subject(subject: str) -> str:
    return Header(subject, "utf-8", maxlinelen=76, header_name="Subject").encode(linesep="\r\n")


class EmailChannel:
    """Multipart (text + HTML, the evidence picture inline) mail over SMTP: STARTTLS,
    implicit TLS or plain, with AUTH."""

    name = "email"

    def __init__(
        self,
        host: str,
        port: int,
        sender: str,
        *,
        security: str = "starttls",
        username: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
        timeout: float = TIMEOUT,
    ) -> None:
        self.host, self.port, self.sender, self.security = host, port, sender, security
        self.username, self.password, self.timeout = username, password, timeout
        self.tls = ssl.create_default_context(cafile=ca_file)

    def compose(self, message: Message, contact: Contact) -> EmailMessage:
        mail = EmailMessage(policy=_MAIL_POLICY)
        mail.set_raw("Subject", encoded_subject(message.subject))
        mail["From"] = self.sender
        mail["To"] = formataddr((untrusted.plain(contact.name), contact.email or ""))
        mail["Message-ID"] = make_msgid(domain=self.sender.rpartition("@")[2] or None)
        mail.set_content(message.text)
        if message.picture:  # the evidence picture, inline below the HTML text
            cid = make_msgid(domain=self.sender.rpartition("@")[2] or None)
            mail.add_alternative(message.html_with(cid[1:-1]), subtype="html")
            html = mail.get_body(("html",))
            assert isinstance(html, EmailMessage)
            html.add_related(
                message.picture,
                "image",
                "png",
                cid=cid,
                filename="evidence.png",
                disposition="inline",
            )
        else:
            mail.add_alternative(message.html, subtype="html")
        mail["Content-Language"] = message.language  # after: set_content drops Content-*
        return mail

    def send(self, message: Message, contact: Contact) -> Delivery:
        mail = self.compose(message, contact)
        try:
            if self.security == "tls":
                smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                    self.host, self.port, timeout=self.timeout, context=self.tls
                )
            else:
                smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
            with smtp:
                if self.security == "starttls":
                    smtp.starttls(context=self.tls)
                if self.username:
                    smtp.login(self.username, self.password or "")
                refused = smtp.send_message(mail)
        except (smtplib.SMTPException, OSError) as exc:
            return Delivery(False, f"{type(exc).__name__}: {exc}")
        if refused:
            return Delivery(False, f"refused: {refused}")
        return Delivery(True, f"mail accepted for {contact.email}")


class WeComChannel:
    """WeCom group robot: a markdown message; the owner @-mentioned by user id."""

    name = "wecom"
    MAX_BYTES = 4096  # the robot's limit for markdown content

    def __init__(self, url: str, *, timeout: float = TIMEOUT) -> None:
        self.url, self.timeout, self.endpoint = url, timeout, Endpoint(url)

    def payload(self, message: Message, contact: Contact) -> dict[str, Any]:
        mention = f"\n<@{contact.wecom}>" if contact.wecom else ""
        content = f"**{message.subject_markdown}**\n{message.markdown}"
        budget = self.MAX_BYTES - len(mention.encode())
        content = content.encode()[:budget].decode(errors="ignore")
        return {"msgtype": "markdown", "markdown": {"content": content + mention}}

    def send(self, message: Message, contact: Contact) -> Delivery:
        return _post_json(
            self.endpoint, self.url, self.payload(message, contact), self.timeout, _errcode
        )


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk's signed-request option: base64(HMAC-SHA256(secret, "ts\\nsecret"))."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256)
    return base64.b64encode(digest.digest()).decode()


class DingTalkChannel:
    """DingTalk robot: markdown with the owner in `at.atUserIds`; signed when a secret is set."""

    name = "dingtalk"

    def __init__(
        self,
        url: str,
        *,
        secret: str | None = None,
        timeout: float = TIMEOUT,
        clock: Any = time.time,
    ) -> None:
        self.url, self.secret, self.timeout = url, secret, timeout
        self.clock, self.endpoint = clock, Endpoint(url)

    def signed_url(self) -> str:
        if not self.secret:
            return self.url
        ts = int(self.clock() * 1000)
        query = urllib.parse.urlencode({"timestamp": ts, "sign": dingtalk_sign(self.secret, ts)})
        return f"{self.url}{'&' if '?' in self.url else '?'}{query}"

    def payload(self, message: Message, contact: Contact) -> dict[str, Any]:
        mention = f"\n\n@{contact.dingtalk}" if contact.dingtalk else ""
        return {
            "msgtype": "markdown",
            "markdown": {"title": message.subject, "text": message.markdown + mention},
            "at": {"atUserIds": [contact.dingtalk] if contact.dingtalk else [], "isAtAll": False},
        }

    def send(self, message: Message, contact: Contact) -> Delivery:
        return _post_json(
            self.endpoint, self.signed_url(), self.payload(message, contact), self.timeout, _errcode
        )


def feishu_sign(secret: str, timestamp_s: int) -> str:
    """Feishu/Lark's signature: base64(HMAC-SHA256 keyed by "ts\\nsecret", of nothing)."""
    key = f"{timestamp_s}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


class FeishuChannel:
    """Feishu/Lark custom bot: a rich-text `post` with the owner @-mentioned by open_id."""

    name = "feishu"

    def __init__(
        self,
        url: str,
        *,
        secret: str | None = None,
        timeout: float = TIMEOUT,
        clock: Any = time.time,
    ) -> None:
        self.url, self.secret, self.timeout = url, secret, timeout
        self.clock, self.endpoint = clock, Endpoint(url)

    def payload(self, message: Message, contact: Contact) -> dict[str, Any]:
        lines: list[list[dict[str, str]]] = []
        if contact.feishu:
            lines.append([{"tag": "at", "user_id": contact.feishu}])
        lines += [[{"tag": "text", "text": line}] for line in message.text.splitlines() if line]
        locale = "zh_cn" if message.language == "zh-CN" else "en_us"
        body: dict[str, Any] = {
            "msg_type": "post",
            "content": {"post": {locale: {"title": message.subject, "content": lines}}},
        }
        if self.secret:
            ts = int(self.clock())
            body = {"timestamp": str(ts), "sign": feishu_sign(self.secret, ts), **body}
        return body

    def send(self, message: Message, contact: Contact) -> Delivery:
        return _post_json(
            self.endpoint,
            self.url,
            self.payload(message, contact),
            self.timeout,
            lambda r: _errcode(r, "code", "msg"),
        )


class SlackChannel:
    """Slack incoming webhook: Block Kit (a header and an mrkdwn section), owner mentioned."""

    name = "slack"
    MAX_SECTION = 3000  # Slack's limit for a section's text

    def __init__(self, url: str, *, timeout: float = TIMEOUT) -> None:
        self.url, self.timeout, self.endpoint = url, timeout, Endpoint(url)

    def payload(self, message: Message, contact: Contact) -> dict[str, Any]:
        mrkdwn = message.slack
        if contact.slack:
            mention = (
                f"<!subteam^{contact.slack}>"
                if contact.slack.startswith("S")
                else (f"<@{contact.slack}>")
            )
            mrkdwn = f"{mention} {mrkdwn}"
        return {
            "text": message.subject_slack,  # the notification's fallback text (mrkdwn)
            "blocks": [
                {"type": "header", "text": {"type": "plain_text", "text": message.subject[:150]}},
                {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn[: self.MAX_SECTION]}},
            ],
        }

    def send(self, message: Message, contact: Contact) -> Delivery:
        def ok(answer: Answer) -> Any:
            return True if answer.text.strip() == "ok" else f"answer {answer.text[:200]!r}"

        return _post_json(self.endpoint, self.url, self.payload(message, contact), self.timeout, ok)
