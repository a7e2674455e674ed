"""The pieces a notice is rendered from: sizes, durations and windows in the owner's
language, the idle energy line, a site template's typo failing loudly, and the mail's HTML
part, which never passes raw HTML through (the renderer's full notices are in
test_notifications.py)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest

from actuator.messages import Message, Price, Renderer, duration, idle_energy, size, span
from tests.helpers.notices import BOB, NOW, notice


def test_sizes_are_shown_in_binary_units() -> None:
    assert size(0) == "0 B" and size(1023) == "1023 B"
    assert size(18 * 2**30) == "18.0 GiB" and size(1536) == "1.5 KiB"
    assert size(5 * 2**50) == "5120.0 TiB"  # the largest unit stays the unit


def test_durations_and_windows_read_in_the_owners_language() -> None:
    assert duration(600, "en") == "10 min" and duration(600, "zh-CN") == "10 分钟"
    assert duration(0.5, "en") == "0.5 s" and duration(0, "en") == "0 min"
    assert span(30 * 86400, "en") == "30 days" and span(86400, "en") == "1 day"
    assert span(30 * 86400, "zh-CN") == "30 天" and span(7200, "zh-CN") == "2 小时"
    assert span(1800, "en") == "30 min"


def test_the_idle_energy_line_is_empty_when_power_is_unknown() -> None:
    assert idle_energy(None, 3600, Price()) == ""
    assert idle_energy(120.0, 0, Price()) == ""
    assert idle_energy(120.0, 3 * 3600, Price()) == "0.36 kWh"
    assert idle_energy(120.0, 3 * 3600, Price(0.8, "¥")) == "0.36 kWh, ¥0.29"


def test_a_typo_in_a_site_template_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "warning.en.md.j2").write_text(
        "{% set subject %}x{% endset %}{{ comand }} will be reclaimed\n"
    )
    with pytest.raises(jinja2.UndefinedError, match="comand"):
        Renderer(tmp_path).render(notice(), BOB, NOW)


def test_the_mail_html_never_passes_raw_html_through() -> None:
    message = Message(
        language="en",
        subject="<b>subject</b>",
        text="",
        markdown="**bold** <script>alert(1)</script>\n",
        subject_markdown="",
        slack="",
        subject_slack="",
    )
    html = message.html_with("picture-1")
    assert "<strong>bold</strong>" in html and "<script>" not in html
    assert "&lt;script&gt;" in html and "<title>&lt;b&gt;subject&lt;/b&gt;</title>" in html
    assert '<img src="cid:picture-1"' in html
