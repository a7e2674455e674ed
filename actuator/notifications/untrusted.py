"""Text that someone other than the site wrote, made safe to show.

Any local user chooses their process's argv and name; users, groups, directory display
names, pod names and annotations, Slurm job names and CRD text are written by people too.
Such text is data: cleaned here once (control characters and Unicode bidi controls removed,
so a right-to-left override cannot make a reviewer read another name; one line; capped),
then escaped for the syntax of the place it lands in (`markdown`, `slack`, `html`).
"""

from __future__ import annotations

import html

# The cleaning and the label form live with the exporter, which writes `command` labels too.
from exporter.text import BIDI_CONTROLS, ELLIPSIS, MAX_CHARS, clean, label

__all__ = [
    "BIDI_CONTROLS",
    "ELLIPSIS",
    "MAX_CHARS",
    "clean",
    "html_text",
    "label",
    "markdown",
    "plain",
    "slack",
]

# Characters that are markup, links or mentions in one of the chat dialects even inside an
# inline code span (WeCom `<@id>` and `<font>`, Slack `<!channel>`), or end the span.
# Each becomes a look-alike that is no markup: modifier prime, single angle quotes.
_CODE_SPAN_BREAKERS = str.maketrans({"`": "\u02b9", "<": "\u2039", ">": "\u203a"})


def _plain_enough(text: str) -> bool:
    """Letters, digits, spaces and punctuation no Markdown dialect reads as markup, link or
    mention: no ``. : / @ * _ ~ # [ ] ( ) ! | < > & ` \\`` (a dot or a colon can make a
    bare domain or URL a link in a chat client)."""
    return all(c.isalnum() or c in " ,-+=%" for c in text)


def markdown(text: object, limit: int = MAX_CHARS) -> str:
    """For chat Markdown (WeCom, DingTalk) and the Markdown the e-mail's HTML is built from:
    plain words as they are, anything else as an inline code span, which every dialect
    shows literally (no emphasis, link, image, heading or mention)."""
    line = clean(text, limit)
    if _plain_enough(line):
        return line
    return f"`{line.translate(_CODE_SPAN_BREAKERS)}`"


def slack(text: object, limit: int = MAX_CHARS) -> str:
    """For Slack mrkdwn: Slack's three control characters as entities (so `<!channel>`,
    `<@U…>` and `<http://…|…>` stay text), and the same code span as `markdown`."""
    line = clean(text, limit)
    if _plain_enough(line):
        return line
    escaped = line.replace("`", "\u02b9").replace("&", "&amp;").replace("<", "&lt;")
    return f"`{escaped.replace('>', '&gt;')}`"


def plain(text: object, limit: int = MAX_CHARS) -> str:
    """For plain text (mail's text part, subjects, Feishu's text elements, labels)."""
    return clean(text, limit)


def html_text(text: object, limit: int = MAX_CHARS) -> str:
    """For HTML outside a template engine with autoescape."""
    return html.escape(clean(text, limit), quote=True)
