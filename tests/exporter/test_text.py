"""Text a user chose, made safe to carry: one printable line, capped; for labels that
chat templates render unescaped, nothing that starts a tag, a mention or a link."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from exporter.text import BIDI_CONTROLS, ELLIPSIS, MAX_CHARS, clean, label


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("python train.py --lr 3e-4", "python train.py --lr 3e-4"),
        ("a\nb\tc\r\nd", "a b c  d"),  # one line: breaks and tabs are spaces
        ("evil\x1b[31mred\x07", "evil[31mred"),  # C0 controls (ESC, BEL) dropped
        ("x\x85y\u2028z", "x y z"),  # NEL and the line separator are breaks too
        ("zero\u200bwidth\ufeff", "zerowidth"),  # format characters dropped
        ("  padded  ", "padded"),
        ("训练 任务", "训练 任务"),  # any script is text
        (42, "42"),
    ],
)
def test_clean_keeps_one_printable_line(raw: object, shown: str) -> None:
    assert clean(raw) == shown


def test_every_bidi_control_is_dropped_so_a_name_reads_as_it_runs() -> None:
    for control in BIDI_CONTROLS:
        assert clean(f"safe{control}exe.py") == "safeexe.py"
    # The classic: "gpj.exe" shown as "exe.jpg" with a right-to-left override.
    assert clean("photo\u202egpj.exe") == "photogpj.exe"


def test_long_text_is_cut_with_a_mark_and_never_exceeds_the_limit() -> None:
    text = "x" * (MAX_CHARS * 5)
    out = clean(text)
    assert len(out) == MAX_CHARS and out.endswith(ELLIPSIS)
    assert clean("abcdef", limit=4) == "abc" + ELLIPSIS
    assert clean("abcd", limit=4) == "abcd"  # at the limit: not cut


def test_a_label_carries_no_tag_mention_or_link_starter() -> None:
    hostile = "<@all> [click](http://x) `rm` <!channel>"
    out = label(hostile)
    assert not set("<>@[]`") & set(out)
    # Look-alikes keep it readable for a human.
    assert out == (
        "\u2039\uff20all\u203a \uff3bclick\uff3d(http://x) \u02b9rm\u02b9 \u2039!channel\u203a"
    )
    assert label("a\nb") == "a b"  # and it is clean


def _character_by_character(text: str) -> str:
    """The rule stated once more, one character at a time, with no shortcut."""
    out = []
    for char in text:
        if char in "\t\r\n\v\f\u2028\u2029\x85":
            out.append(" ")
        elif char not in BIDI_CONTROLS and unicodedata.category(char) not in (
            "Cc",
            "Cf",
            "Co",
            "Cs",
        ):
            out.append(char)
    return "".join(out).strip()


def test_the_shortcut_for_printable_text_keeps_and_drops_exactly_what_the_rule_does() -> None:
    # Every code point between letters: text that skips the per-character loop
    # (str.isprintable) must come out as the rule makes it.
    for code in range(sys.maxunicode + 1):
        text = f"a{chr(code)}b"
        assert clean(text) == _character_by_character(text), hex(code)
