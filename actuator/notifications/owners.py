"""Who to warn about a process: the exporter's identity (user, project) -> a person with
contacts, a language and a time zone. A user missing from the directory falls back to the
project's contact, then to the SRE route; with none of them the notice is undeliverable (and
the escalation waits, by the notice gate), never silently sent to nobody.

The directory is a YAML file::

    users:
      alice: {name: 李雷, email: alice@example.com, wecom: lilei, language: zh-CN,
              timezone: Asia/Shanghai}
      bob: {email: bob@example.com, slack: U024BE7LH, language: en, timezone: Europe/Berlin}
    projects:
      vision: {name: Vision team, email: vision-oncall@example.com, wecom: vision-bot}
    sre: {name: GPU SRE, email: gpu-sre@example.com, slack: S0123SRE}
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from exporter import config_errors

ChannelName = Literal["email", "wecom", "dingtalk", "feishu", "slack"]
CHANNELS: tuple[ChannelName, ...] = ("email", "wecom", "dingtalk", "feishu", "slack")
Language = Literal["zh-CN", "en"]


class DirectoryError(Exception):
    """The directory file is unreadable or invalid; the message names the file."""


class Contact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    email: str | None = Field(None, pattern=r"^[^@\s]+@[^@\s]+$")
    wecom: str | None = Field(None, description="WeCom user id, @-mentioned by the group robot")
    dingtalk: str | None = Field(None, description="DingTalk user id (atUserIds)")
    feishu: str | None = Field(None, description="Feishu/Lark open_id (ou_...)")
    slack: str | None = Field(None, description="Slack member or group id (U..., S...)")
    language: Language = "en"
    timezone: str = "UTC"
    channels: tuple[ChannelName, ...] | None = Field(
        None, description="channels to use, in order (default: every one with an address)"
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r} (use an IANA name: Asia/Shanghai)"
            ) from None
        return value

    def address(self, channel: ChannelName) -> str | None:
        value: str | None = getattr(self, channel)
        return value

    def reachable(self, configured: set[str]) -> list[ChannelName]:
        """The channels this contact can be reached on among those the site configured."""
        wanted = self.channels or CHANNELS
        return [c for c in wanted if c in configured and self.address(c)]


@dataclass(frozen=True)
class Recipient:
    contact: Contact
    via: Literal["user", "project", "sre"]
    channels: tuple[ChannelName, ...]


class OwnerDirectory(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    users: dict[str, Contact] = {}
    projects: dict[str, Contact] = {}
    sre: Contact | None = None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> OwnerDirectory:
        try:
            data = config_errors.read_yaml(path) or {}
        except config_errors.YamlFileError as exc:
            raise DirectoryError(f"owner directory {exc}") from None
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise DirectoryError(
                config_errors.describe(error, data, os.fspath(path), "owner directory")
            ) from None

    def resolve(
        self,
        user: str | None,
        project: str | None,
        configured: set[str],
        lookup: Callable[[str], Contact | None] | None = None,
        named: Contact | None = None,
    ) -> Recipient | None:
        """The first of user, the owner the workload names (`named`: a pod's owner
        annotation), project contact, SRE route reachable on a configured channel. A user
        listed in the file wins over `lookup` (the LDAP source) for the same name."""
        person = self.users.get(user or "")
        if person is None and lookup is not None and user:
            person = lookup(user)
        candidates: list[tuple[Literal["user", "project", "sre"], Contact | None]] = [
            ("user", person),
            ("user", named),
            ("project", self.projects.get(project or "")),
            ("sre", self.sre),
        ]
        for via, contact in candidates:
            if contact is None:
                continue
            channels = contact.reachable(configured)
            if channels:
                return Recipient(contact, via, tuple(channels))
        return None
