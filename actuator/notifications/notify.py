"""Notices to the owner before anything is signalled: to the owner's own channels (email,
WeCom, DingTalk, Feishu, Slack; `OwnerNotifier`), or as JSON to one webhook."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from actuator.endpoints import Endpoint, EndpointError
from actuator.notifications.channels import Channel, Delivery
from actuator.notifications.messages import Message, Renderer
from actuator.notifications.notice import Notice
from actuator.notifications.owners import Contact, OwnerDirectory

if TYPE_CHECKING:  # ldap3 loads only where LDAP is configured (actuator/server.py)
    from actuator.notifications.ldap_owners import LdapOwners

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NoticeResult:
    delivered: bool
    detail: str


class Notifier(Protocol):
    def send(self, notice: Notice, *, dry_run: bool) -> NoticeResult: ...

    def followup(self, notice: Notice) -> NoticeResult: ...


class NullNotifier:
    """No channel configured: the notice exists only in the audit log and the API."""

    def send(self, notice: Notice, *, dry_run: bool) -> NoticeResult:
        prefix = "DRY-RUN: would record" if dry_run else "recorded"
        log.info("%s notice for case %s (no notifier configured)", prefix, notice.case)
        return NoticeResult(False, "no notifier configured")

    def followup(self, notice: Notice) -> NoticeResult:
        return NoticeResult(False, "no notifier configured")


class WebhookNotifier:
    """POST the notice as JSON; a bounded timeout, never retried inline, never raises."""

    def __init__(self, url: str, *, timeout: float = 5.0, headers: dict[str, str] | None = None):
        self.url = url
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self._endpoint = Endpoint(url)

    def send(self, notice: Notice, *, dry_run: bool) -> NoticeResult:
        if dry_run:
            log.info("DRY-RUN: would POST notice for case %s to %s", notice.case, self.url)
            return NoticeResult(False, "dry run")
        try:
            answer = self._endpoint.post_json(
                self.url, notice.to_json(), headers=self.headers, timeout=self.timeout
            )
        except EndpointError as exc:
            return NoticeResult(False, str(exc))
        if answer.status >= 300:
            return NoticeResult(False, f"HTTP {answer.status}")
        return NoticeResult(True, f"HTTP {answer.status}")

    def followup(self, notice: Notice) -> NoticeResult:
        """The JSON webhook gets warnings only (its receivers count on one notice per case)."""
        return NoticeResult(False, "the JSON webhook gets no follow-up")


class OwnerNotifier:
    """The owner's own channels: the directory finds the person (or the project's contact,
    or the SRE route), the renderer writes the message in their language and time zone, and
    every channel they can be reached on is tried; delivered when at least one accepted it."""

    def __init__(
        self,
        directory: OwnerDirectory,
        channels: Mapping[str, Channel],
        renderer: Renderer,
        *,
        clock: Callable[[], float] = time.time,
        ldap: LdapOwners | None = None,
    ) -> None:
        self.directory, self.channels, self.renderer = directory, dict(channels), renderer
        self.clock, self.ldap = clock, ldap

    def send(self, notice: Notice, *, dry_run: bool) -> NoticeResult:
        """To the person the node proves owns the process: its user (uid -> name), the owner
        the scheduler proves (a pod's annotation, a Slurm job's user), the project of the
        node's mapping, the SRE route. Alert labels never choose a recipient."""
        lookup = self.ldap.lookup if self.ldap else None
        named = None
        if notice.owner.email:  # a pod's owner annotation, its namespace's language
            language = notice.owner.language if notice.owner.language == "zh-CN" else "en"
            named = Contact(email=notice.owner.email, language=language)
        user, project = notice.user, notice.facts.project
        recipient = self.directory.resolve(user, project, set(self.channels), lookup, named=named)
        if recipient is None:
            why = f" ({self.ldap.last_error})" if self.ldap and self.ldap.last_error else ""
            return NoticeResult(
                False,
                f"nobody to tell: user {user!r}, project {project!r} and the SRE "
                f"route have no address on a configured channel{why}",
            )
        message = self.renderer.render(notice, recipient.contact, self.clock())
        who = f"{recipient.via} {recipient.contact.name or user}"
        if recipient.via != "user" and self.ldap and self.ldap.last_error:
            who += f" ({self.ldap.last_error})"
        if dry_run:
            log.info(
                "DRY-RUN: would send case %s to %s by %s",
                notice.case,
                who,
                ", ".join(recipient.channels),
            )
            return NoticeResult(False, "dry run")
        results = [
            (name, self._send_on(name, message, recipient.contact)) for name in recipient.channels
        ]
        detail = f"to {who} ({recipient.contact.language}): " + "; ".join(
            f"{name} {'delivered' if r.delivered else 'failed'}: {r.detail}" for name, r in results
        )
        if notice.copy_project and recipient.via == "user":
            detail += self._copy_project(notice, project)
        # The owner's delivery is the gate; the copy is told, not waited for.
        return NoticeResult(any(r.delivered for _, r in results), detail)

    def _send_on(self, name: str, message: Message, contact: Contact) -> Delivery:
        """One channel's delivery. A channel never raises by contract; one that does all the
        same (a defect, an answer nobody foresaw) is a failed delivery on that channel alone:
        were it to escape, the notice's outcome would go unrecorded and the notice be sent
        again at every pass, on the owner's other channels too."""
        try:
            return self.channels[name].send(message, contact)
        except Exception as exc:
            log.exception("the %s channel raised instead of answering", name)
            return Delivery(False, f"the channel raised {type(exc).__name__}: {exc}")

    def _copy_project(self, notice: Notice, project: str) -> str:
        """Repeat habits: the project's contact gets the owner's notice too."""
        contact = self.directory.projects.get(project)
        channels = contact.reachable(set(self.channels)) if contact else []
        if contact is None or not channels:
            return f"; project {project or '(none)'}'s contact not copied: no address"
        # Addressed to the contact, about the owner's process (never as if theirs).
        message = self.renderer.render(
            notice, contact, self.clock(), copy_for=notice.user or "its owner"
        )
        copied = [(name, self._send_on(name, message, contact)) for name in channels]
        return f"; copied to project {contact.name or project}: " + ", ".join(
            f"{name} {'delivered' if r.delivered else 'failed'}" for name, r in copied
        )

    def followup(self, notice: Notice) -> NoticeResult:
        """After a reclaim: what was freed and the case id (best effort, not a gate)."""
        return self.send(dataclasses.replace(notice, kind="reclaimed"), dry_run=False)
