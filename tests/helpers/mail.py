"""A mailbox for aiosmtpd: every message the SMTP server accepted, parsed."""

from __future__ import annotations

import email
import email.policy
from typing import Any


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(
            email.message_from_bytes(envelope.content, policy=email.policy.default)
        )
        return "250 OK"

    def about(self, pid: int, word: str) -> list[str]:
        """Plain-text bodies of the mails about `pid` whose subject has `word`."""
        return [
            m.get_body(("plain",)).get_content()
            for m in self.messages
            if f"PID {pid}" in m["Subject"] and word in m["Subject"]
        ]
