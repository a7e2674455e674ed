"""What the owner reads: a notice (notice.py) rendered from Jinja templates in their
language and time zone, as plain text, chat Markdown, Slack mrkdwn and HTML (e-mail).

Every string a template prints is untrusted unless the actuator wrote it (`Trusted`): it is
escaped for each syntax after the template's own markup is turned into that syntax, so no
process name, user name or display name becomes a link, an image, a mention or HTML.

Templates are `<kind>.<language>.md.j2` (kinds: `warning` before the grace period ends,
`reclaimed` after, `idle` when `reclaim_when: demand` keeps the process until someone
needs its GPU, `suspended` when the suspend rung checkpointed it, `restore` for where its
owner's resume stands); a site directory given
in the config is searched first, so a site overrides one template by writing a file of the
same name. A template sets `subject` with
`{% set subject %}...{% endset %}`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import jinja2
import markdown

from actuator.notifications import untrusted
from actuator.notifications.notice import Notice
from actuator.notifications.owners import Contact

BUILTIN_TEMPLATES = Path(str(files("actuator").joinpath("templates")))


@dataclass(frozen=True)
class Message:
    """One notice in each syntax a channel speaks; every one is built from the same template
    with untrusted values escaped for that syntax (actuator/notifications/untrusted.py)."""

    language: str
    subject: str  # plain text: a mail header, a plain_text title
    text: str  # plain text: the mail's text part, Feishu's text elements
    markdown: str  # chat Markdown (WeCom, DingTalk) and the source of the HTML part
    subject_markdown: str
    slack: str  # Slack mrkdwn
    subject_slack: str
    picture: bytes = field(default=b"", repr=False)  # the evidence picture (PNG), if any

    @property
    def html(self) -> str:
        return self.html_with()

    def html_with(self, picture_cid: str = "") -> str:
        """The mail's HTML part from the Markdown, with raw HTML never passed through; the
        evidence picture shown below it when the mail carries it as `picture_cid`."""
        converter = markdown.Markdown(output_format="html")
        converter.preprocessors.deregister("html_block")
        converter.inlinePatterns.deregister("html")
        body = converter.convert(self.markdown)
        if picture_cid:
            alt = (
                "GPU use over the last hours"
                if self.language == "en"
                else "近几小时的 GPU 使用情况"
            )
            body += f'<p><img src="cid:{picture_cid}" alt="{alt}" width="640"></p>'
        return (
            f'<!DOCTYPE html><html lang="{self.language}"><head><meta charset="utf-8">'
            f"<title>{jinja2.filters.escape(self.subject)}</title></head>"
            f"<body>{body}</body></html>"
        )


class Trusted(str):
    """A template value the actuator itself wrote (a time, a size, a link it signed, the
    site's own SRE text): inserted as is. Every other string is untrusted and escaped."""


Dialect = Literal["text", "markdown", "slack"]
_ESCAPE: dict[Dialect, Callable[[object], str]] = {
    "text": untrusted.plain,
    "markdown": untrusted.markdown,
    "slack": untrusted.slack,
}
_SLOT = re.compile("\x00(\\d+)\x00")
_slots: ContextVar[list[str]] = ContextVar("slots")


def _finalize(value: Any) -> Any:
    """Every `{{ }}` output: an untrusted string becomes a slot, filled once the template's
    own markup has been turned into the dialect (so that never touches the value)."""
    if isinstance(value, Trusted) or not isinstance(value, str):
        return value
    slots = _slots.get()
    slots.append(value)
    return f"\x00{len(slots) - 1}\x00"


def _markup(text: str, dialect: Dialect) -> str:
    """The template's own Markdown in the dialect."""
    if dialect == "text":
        return re.sub(r"\*\*(.+?)\*\*", r"\1", text).replace("`", "")
    if dialect == "slack":  # Slack's control characters, then its single-star bold
        text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return text.replace("**", "*")
    return text


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float, language: str) -> str:
    if seconds >= 60 or seconds == 0:
        minutes = round(seconds / 60)
        return f"{minutes} 分钟" if language == "zh-CN" else f"{minutes} min"
    return f"{seconds:g} 秒" if language == "zh-CN" else f"{seconds:g} s"


def span(seconds: float, language: str) -> str:
    """A window for people: '30 days' / '30 天' from a day on, else as `duration`."""
    if seconds >= 86400:
        days = round(seconds / 86400)
        return f"{days} 天" if language == "zh-CN" else f"{days} day{'s' if days != 1 else ''}"
    hours = round(seconds / 3600)
    if seconds >= 3600:
        return f"{hours} 小时" if language == "zh-CN" else f"{hours} h"
    return duration(seconds, language)


@dataclass(frozen=True)
class Price:
    """What a kWh costs, for the notices' cost line (None: say the energy only)."""

    per_kwh: float | None = None
    currency: str = ""


def idle_energy(power_watts: float | None, seconds: float, price: Price) -> str:
    """'1.10 kWh' (and ', ¥0.88' with a price): the process's share of its GPU's power
    now, over the time it has been idle. An estimate from one reading: the text says so."""
    if power_watts is None or seconds <= 0:
        return ""
    kwh = power_watts * seconds / 3.6e6
    cost = f", {price.currency}{kwh * price.per_kwh:.2f}" if price.per_kwh is not None else ""
    return f"{kwh:.2f} kWh{cost}"


class Renderer:
    def __init__(
        self, site_dir: str | Path | None = None, *, sre: str = "", price: Price = Price()
    ) -> None:
        self.price = price
        search = [str(site_dir)] if site_dir else []
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader([*search, str(BUILTIN_TEMPLATES)]),
            autoescape=False,  # not HTML: untrusted values are escaped per dialect instead
            finalize=_finalize,
            undefined=jinja2.StrictUndefined,  # a typo in a site template fails loudly
            keep_trailing_newline=True,
        )
        self.sre = sre

    def values(
        self, notice: Notice, contact: Contact, now: float, copy_for: str = ""
    ) -> dict[str, Any]:
        """What a template may print; strings not marked Trusted are escaped. `copy_for`:
        the owner whose notice this is a copy of (the project's contact reads it)."""
        language, facts = contact.language, notice.facts
        zone = ZoneInfo(contact.timezone)

        def local(ts: float) -> Trusted:
            return Trusted(datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%d %H:%M"))

        limits = dict(notice.thresholds)
        keep_url = (
            f"{notice.keep_url}?lang={language}&tz={contact.timezone}" if notice.keep_url else ""
        )
        return {
            "case": notice.case,
            "node": facts.node,
            "gpu": facts.gpu,
            "pid": facts.pid,
            "command": facts.program or "?",
            "cmdline": untrusted.clean(facts.cmdline, 300),
            "gpu_model": facts.gpu_model,
            "name": contact.name or notice.user,
            "user": notice.user,
            "project": facts.project,
            "pod": facts.pod,
            "namespace": facts.namespace,
            "slurm_job": facts.slurm_job,
            "alertname": notice.alertname,
            "memory": Trusted(size(facts.memory_bytes or 0)),
            "freed": Trusted(size(notice.freed_bytes)),
            "since": local(notice.since),
            "idle_minutes": max(0, round((now - notice.since) / 60)),
            "idle_energy": Trusted(idle_energy(facts.power_watts, now - notice.since, self.price)),
            "deadline": local(notice.deadline),
            "timezone": Trusted(contact.timezone),
            "term_timeout": Trusted(duration(notice.term_timeout, language)),
            "grace": Trusted(duration(notice.grace, language)),
            "waiting": notice.waiting,
            "waiting_through": notice.waiting_through,
            "copy_for": copy_for,
            "repeat_prior": notice.repeat_prior,
            "repeat_window": Trusted(span(notice.repeat_window, language)),
            "copy_project": notice.copy_project,
            "keep_needs_sre": notice.keep_needs_sre,
            "service": notice.service,
            "service_window": Trusted(span(notice.service_window, language)),
            "service_by": notice.service_by,
            "service_ports": Trusted(", ".join(str(p) for p in notice.service_ports) or "?"),
            "service_clients": notice.service_clients,
            "service_client_ago": Trusted(span(notice.service_client_ago or 0.0, language)),
            "service_watched": Trusted(span(notice.service_watched or 0.0, language)),
            # What the node saw of the owner (a terminal's name is the node's text: escaped).
            "presence": notice.presence_seen,
            "presence_login": facts.presence().on_terminal(notice.presence_idle),
            "presence_terminal": facts.owner_terminal,  # "" for a session without a tty
            "presence_terminal_idle": Trusted(
                duration(round(facts.owner_terminal_idle or 0.0), language)
            ),
            "presence_notebooks": facts.owner_notebook_connections or 0,
            "presence_grace": Trusted(span(notice.presence_grace, language)),
            "suspend": notice.suspend,
            "checked_at": local(facts.checked_at) if facts.checked_at else "",
            "restore": notice.restore,
            "restore_detail": untrusted.clean(notice.restore_detail, 300),
            "restore_try": notice.restore_try,
            "restore_tries": notice.restore_tries,
            "sm_util": Trusted(f"{facts.sm_util:.0%}") if facts.sm_util is not None else "",
            "max_sm_util": Trusted(f"{limits['max_sm_util']:.0%}")
            if "max_sm_util" in limits
            else "",
            # The page opens in the owner's language whatever their browser says.
            "keep_url": Trusted(keep_url),
            # A signed link to the evidence picture (read-only; chat shows it to the channel).
            "evidence_url": Trusted(notice.picture_url),
            "sre": Trusted(
                self.sre or ("GPU 运维团队" if language == "zh-CN" else "the GPU SRE team")
            ),
        }

    def render(
        self, notice: Notice, contact: Contact, now: float, *, copy_for: str = ""
    ) -> Message:
        template = self.env.get_template(f"{notice.kind}.{contact.language}.md.j2")
        values = self.values(notice, contact, now, copy_for)
        # One run of the template serves every dialect: what it prints does not depend on
        # the dialect (untrusted values wait in slots), only the markup and escaping after.
        token = _slots.set([])
        try:
            module = template.make_module(values)
            body = str(module)
            subject = str(module.subject).strip()  # type: ignore[attr-defined]
            slots = _slots.get()
        finally:
            _slots.reset(token)
        out: dict[Dialect, tuple[str, str]] = {}
        for dialect in ("text", "markdown", "slack"):
            escape = _ESCAPE[dialect]

            def fill(
                text: str, escape: Callable[[object], str] = escape, slots: list[str] = slots
            ) -> str:
                return _SLOT.sub(lambda m: escape(slots[int(m.group(1))]), text)

            out[dialect] = (
                fill(_markup(subject, dialect)),
                fill(_markup(body.strip(), dialect)) + "\n",
            )
        return Message(
            language=contact.language,
            subject=untrusted.plain(out["text"][0], 500),
            text=out["text"][1],
            markdown=out["markdown"][1],
            subject_markdown=out["markdown"][0],
            slack=out["slack"][1],
            subject_slack=out["slack"][0],
            picture=notice.picture_png,
        )
