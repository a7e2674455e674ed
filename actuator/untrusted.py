"""Text that someone other than the site wrote, made safe to show.

Any local user chooses their process's argv and name; users, groups, directory display
names, pod names and annotations, Slurm job names and CRD text are written by people too.
Such text is data: cleaned here once (control characters and Unicode bidi controls removed,
so a right-to-left override cannot make a reviewer read another name; one line; capped),
then escaped for the syntax of the place it lands in (`markdown`, `slack`, `html`).
"""

from __future__ import annotations

import html
import unicodedata

MAX_CHARS = 200  # a command line, a name: enough to recognise, never a wall of text
ELLIPSIS = "…"

# Explicit directional formatting (UAX #9): embeddings, overrides, isolates and marks.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
# Characters that are markup, links or mentions in one of the chat dialects even inside an
# inline code span (WeCom `<@id>` and `<font>`, Slack `<!channel>`), or end the span.
# Each becomes a look-alike that is no markup: modifier prime, single angle quotes.
_CODE_SPAN_BREAKERS = str.maketrans({"`": "\u02b9", "<": "\u2039", ">": "\u203a"})


def clean(text: object, limit: int = MAX_CHARS) -> str:
    """One line of printable text: controls (C0, C1, DEL), bidi controls, zero-width and
    other format characters dropped; line breaks and tabs become spaces; at most `limit`
    characters (the cut marked with an ellipsis)."""
    out = []
    for char in str(text):
        if char in "\t\r\n\v\f\u2028\u2029\x85":
            out.append(" ")
            continue
        if char in BIDI_CONTROLS or unicodedata.category(char) in ("Cc", "Cf", "Co", "Cs"):
            continue
        out.append(char)
    line = "".join(out).strip()
    return line if len(line) <= limit else line[: max(0, limit - 1)].rstrip() + ELLIPSIS


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


# For text that chat templates downstream render unescaped (Alertmanager's Slack, WeCom and
# webhook templates): fullwidth look-alikes for what would be a tag, mention or link there.
_LABEL_BREAKERS = str.maketrans(
    {"<": "\u2039", ">": "\u203a", "`": "\u02b9", "[": "\uff3b", "]": "\uff3d", "@": "\uff20"}
)


def label(text: object, limit: int = MAX_CHARS) -> str:
    """For Alertmanager label and annotation values (never escaped by whoever renders them):
    one clean line with no character that starts a tag, a mention or a Markdown link."""
    return clean(text, limit).translate(_LABEL_BREAKERS)


def html_text(text: object, limit: int = MAX_CHARS) -> str:
    """For HTML outside a template engine with autoescape."""
    return html.escape(clean(text, limit), quote=True)
