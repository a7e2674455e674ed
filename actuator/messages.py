"""What the owner reads: a notice's facts rendered from Jinja templates in their language
and time zone, as Markdown (chat robots), plain text and HTML (email).

Templates are `<kind>.<language>.md.j2` (kinds: `warning` before the grace period ends,
`reclaimed` after); a site directory given in the config is searched first, so a site
overrides one template by writing a file of the same name. A template sets `subject` with
`{% set subject %}...{% endset %}`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import jinja2
import markdown

from actuator.owners import Contact

Kind = Literal["warning", "reclaimed"]
BUILTIN_TEMPLATES = Path(str(files("actuator").joinpath("templates")))


@dataclass(frozen=True)
class NoticeFacts:
    """Everything a message says about one case (wall-clock times are unix seconds)."""

    case: int
    kind: Kind
    node: str
    gpu: str
    pid: int
    command: str
    user: str
    project: str
    alertname: str
    memory_bytes: int
    since: float  # when the alert's condition started
    deadline: float  # SIGTERM unless kept
    term_timeout: float
    freed_bytes: int = 0
    gpu_model: str = ""
    keep_url: str = ""

    @classmethod
    def from_notice(cls, notice: dict[str, Any]) -> NoticeFacts:
        return cls(
            case=int(notice["case"]), kind=notice.get("kind", "warning"), node=notice["node"],
            gpu=str(notice.get("gpu", "?")), pid=int(notice["pid"]),
            command=notice.get("command") or "?", user=notice.get("user") or "?",
            project=notice.get("project") or "", alertname=notice.get("alertname", ""),
            memory_bytes=int(notice.get("gpu_memory_bytes") or 0),
            since=float(notice.get("since") or notice["sigterm_at"]),
            deadline=float(notice["sigterm_at"]),
            term_timeout=float(notice.get("term_timeout") or 0),
            freed_bytes=int(notice.get("freed_bytes") or 0),
            gpu_model=notice.get("gpu_model") or "", keep_url=notice.get("keep_url") or "",
        )  # fmt: skip


@dataclass(frozen=True)
class Message:
    language: str
    subject: str
    markdown: str

    @property
    def text(self) -> str:
        """Plain text: the Markdown without its emphasis marks."""
        return re.sub(r"\*\*(.+?)\*\*", r"\1", self.markdown).replace("`", "")

    @property
    def html(self) -> str:
        body = markdown.markdown(self.markdown, output_format="html")
        return (f'<!DOCTYPE html><html lang="{self.language}"><head><meta charset="utf-8">'
                f"<title>{jinja2.filters.escape(self.subject)}</title></head>"
                f"<body>{body}</body></html>")  # fmt: skip


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


class Renderer:
    def __init__(self, site_dir: str | Path | None = None, *, sre: str = "") -> None:
        search = [str(site_dir)] if site_dir else []
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader([*search, str(BUILTIN_TEMPLATES)]),
            autoescape=False,  # Markdown out; the HTML is built from it by `markdown`
            undefined=jinja2.StrictUndefined,  # a typo in a site template fails loudly
            keep_trailing_newline=True,
        )
        self.sre = sre

    def render(self, facts: NoticeFacts, contact: Contact, now: float) -> Message:
        language = contact.language
        zone = ZoneInfo(contact.timezone)

        def local(ts: float) -> str:
            return datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%d %H:%M")

        template = self.env.get_template(f"{facts.kind}.{language}.md.j2")
        values = {
            "case": facts.case, "node": facts.node, "gpu": facts.gpu, "pid": facts.pid,
            "command": facts.command, "gpu_model": facts.gpu_model,
            "name": contact.name or facts.user, "user": facts.user, "project": facts.project,
            "alertname": facts.alertname, "memory": size(facts.memory_bytes),
            "freed": size(facts.freed_bytes), "since": local(facts.since),
            "idle_minutes": max(0, round((now - facts.since) / 60)),
            "deadline": local(facts.deadline), "timezone": contact.timezone,
            "term_timeout": duration(facts.term_timeout, language),
            # The page opens in the owner's language whatever their browser says.
            "keep_url": f"{facts.keep_url}?lang={language}&tz={contact.timezone}"
            if facts.keep_url
            else "",
            "sre": self.sre or ("GPU 运维团队" if language == "zh-CN" else "the GPU SRE team"),
        }  # fmt: skip
        body = template.render(values)
        subject = str(template.make_module(values).subject).strip()  # type: ignore[attr-defined]
        return Message(language, subject, body.strip() + "\n")
