"""Text a user chose (a process's argv, its name), made safe to carry: control characters and
Unicode bidi controls removed (a right-to-left override makes a reviewer read another
name), one line, capped; and, for a label that chat templates render unescaped downstream
(the rules' summaries in Alertmanager's Slack or WeCom templates), no character that starts
a tag, a mention or a Markdown link. The actuator escapes the same text per channel
(actuator/notifications/untrusted.py)."""

from __future__ import annotations

import unicodedata

MAX_CHARS = 200  # a command line, a name: enough to recognise, never a wall of text
ELLIPSIS = "…"

# Explicit directional formatting (UAX #9): embeddings, overrides, isolates and marks.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def clean(text: object, limit: int = MAX_CHARS) -> str:
    """One line of printable text: controls (C0, C1, DEL), bidi controls, zero-width and
    other format characters dropped; line breaks and tabs become spaces; at most `limit`
    characters (the cut marked with an ellipsis)."""
    raw = str(text)
    # Text with nothing to drop or replace, the common case, skips the loop: a string that
    # is printable has no control, format, surrogate, private-use or line or paragraph
    # separator character in it (tabs and line breaks included), so the loop would keep it.
    line = (raw if raw.isprintable() else _printable(raw)).strip()
    return line if len(line) <= limit else line[: max(0, limit - 1)].rstrip() + ELLIPSIS


def _printable(raw: str) -> str:
    out = []
    for char in raw:
        if char in "\t\r\n\v\f\u2028\u2029\x85":
            out.append(" ")
            continue
        if char in BIDI_CONTROLS or unicodedata.category(char) in ("Cc", "Cf", "Co", "Cs"):
            continue
        out.append(char)
    return "".join(out)


# For text that chat templates downstream render unescaped (Alertmanager's Slack, WeCom and
# webhook templates): fullwidth look-alikes for what would be a tag, mention or link there.
_LABEL_BREAKERS = str.maketrans(
    {"<": "\u2039", ">": "\u203a", "`": "\u02b9", "[": "\uff3b", "]": "\uff3d", "@": "\uff20"}
)


def label(text: object, limit: int = MAX_CHARS) -> str:
    """For Alertmanager label and annotation values (never escaped by whoever renders them):
    one clean line with no character that starts a tag, a mention or a Markdown link."""
    return clean(text, limit).translate(_LABEL_BREAKERS)
