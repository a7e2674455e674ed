"""Notices to the owner before anything is signalled (a generic JSON webhook for now)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import requests

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NoticeResult:
    delivered: bool
    detail: str


class Notifier(Protocol):
    def send(self, notice: dict[str, Any], *, dry_run: bool) -> NoticeResult: ...


class NullNotifier:
    """No channel configured: the notice exists only in the audit log and the API."""

    def send(self, notice: dict[str, Any], *, dry_run: bool) -> NoticeResult:
        prefix = "DRY-RUN: would record" if dry_run else "recorded"
        log.info("%s notice for case %s (no notifier configured)", prefix, notice.get("case"))
        return NoticeResult(False, "no notifier configured")


class WebhookNotifier:
    """POST the notice as JSON; a bounded timeout, never retried inline, never raises."""

    def __init__(self, url: str, *, timeout: float = 5.0, headers: dict[str, str] | None = None):
        self.url = url
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self._session = requests.Session()

    def send(self, notice: dict[str, Any], *, dry_run: bool) -> NoticeResult:
        if dry_run:
            log.info("DRY-RUN: would POST notice for case %s to %s", notice.get("case"), self.url)
            return NoticeResult(False, "dry run")
        try:
            response = self._session.post(
                self.url, json=notice, headers=self.headers, timeout=self.timeout
            )
        except requests.RequestException as exc:
            return NoticeResult(False, f"{type(exc).__name__}: {exc}")
        if response.status_code >= 300:
            return NoticeResult(False, f"HTTP {response.status_code}")
        return NoticeResult(True, f"HTTP {response.status_code}")
