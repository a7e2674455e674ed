"""Text people wrote, cleaned and escaped (actuator/notifications/untrusted.py); the whole
hostile corpus through every channel is in test_notifications.py."""

from __future__ import annotations

from actuator.notifications import untrusted


def test_cleaning_removes_what_makes_a_reviewer_read_another_name() -> None:
    assert untrusted.clean("train\u202egnp.exe") == "traingnp.exe"
    assert untrusted.clean("a\r\nb\tc\x00d\x1b[1m") == "a  b cd[1m"
    assert untrusted.clean("y" * 10, limit=5) == "yyyy…"
    assert untrusted.markdown("李雷") == "李雷"  # plain words stay plain
    assert untrusted.markdown("<@all>") == "`\u2039@all\u203a`"
    assert untrusted.slack("<!channel> & co") == "`&lt;!channel&gt; &amp; co`"


def test_labels_lose_what_a_chat_template_would_render() -> None:
    assert untrusted.label("<!channel> [x](y) @all `z`") == (
        "\u2039!channel\u203a \uff3bx\uff3d(y) \uff20all \u02b9z\u02b9"
    )
    assert untrusted.label("a\nb") == "a b"


def test_html_text_is_escaped_and_clean() -> None:
    assert untrusted.html_text('<b onclick="x">\u202e') == "&lt;b onclick=&quot;x&quot;&gt;"
