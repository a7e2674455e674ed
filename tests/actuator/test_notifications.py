"""Owner notices through the real actuator: the owner warned and told afterwards, who is
warned and what they read proven by the node (never the alert's labels), untrusted text
rendered as data in every channel and language, and the evidence picture's link (each
part's own tests: test_owners, test_messages, test_channels, test_notify)."""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from actuator.notifications import untrusted
from actuator.notifications.channels import (
    FeishuChannel,
    SlackChannel,
    WeComChannel,
)
from actuator.notifications.messages import Renderer
from actuator.notifications.notice import Notice
from actuator.notifications.owners import Contact
from tests.helpers.notices import BOB, LILEI, NOW, notice
from tests.helpers.robots import robot

# -- through the real actuator ------------------------------------------------------------


@pytest.mark.reliability(47)
def test_the_owner_gets_the_warning_on_wecom_and_a_follow_up_after_the_reclaim(
    tmp_path: Path, workloads, actuator_factory
) -> None:
    """The actuator process, a real workload, the notice gate on: the warning is delivered
    before the grace starts, the follow-up after the reclaim says what was freed."""
    import getpass

    from tests.helpers.actuator import alert_for, payload
    from tests.support import wait_until

    owners = tmp_path / "owners.yml"
    owners.write_text(
        f"users:\n  {getpass.getuser()}: {{name: 测试, wecom: tester, "
        "language: zh-CN, timezone: Asia/Shanghai}\n"
    )
    with robot("wecom") as wecom:
        actuator = actuator_factory(
            workloads.node_dir,
            notice={"required": True},
            notifier={
                "directory": str(owners),
                "wecom": {"url": wecom.url},
                "sre_contact": "GPU 运维",
            },
        )
        w = workloads.spawn()
        assert (
            actuator.post(payload(alert_for(w, command="python train.py", gpu="0"))).status_code
            == 200
        )
        case = actuator.wait_state(w, "reclaimed", "refused", "failed", timeout=30)
        assert case["state"] == "reclaimed", case
        wait_until(lambda: len(wecom.received) == 2, 10)
        warning, followup = (r["markdown"]["content"] for r in wecom.received)
    # The alert claimed `python train.py`; the owner reads what the node runs as that PID.
    assert f"`exporter.cli`（PID {w.pid}）" in warning and "是否仍在进行" in warning
    assert "train.py" not in warning and "train.py" not in followup
    assert warning.endswith("<@tester>") and f"工单号 {case['id']}" in warning
    assert "已被回收" in followup and f"工单号 {case['id']}" in followup

    def audit() -> list[dict[str, Any]]:
        lines = (actuator.workdir / "audit.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    # The follow-up's record is written once its post has returned: a moment after the robot
    # has it.
    wait_until(lambda: any(r.get("event") == "followup" for r in audit()), 10)
    (notified,) = [r for r in audit() if r.get("to") == "notified"]
    assert notified["alert_disagrees"]["command"] == {
        "alert": "python train.py",
        "node": "exporter.cli",
    }
    (sent,) = [r for r in audit() if r.get("event") == "notice"]
    assert sent["delivered"] and "wecom delivered" in sent["detail"]
    (told,) = [r for r in audit() if r.get("event") == "followup"]
    assert told["delivered"]


# -- people are told proven facts (who, what) ----------------------------------------------


@pytest.mark.reliability(47)
def test_who_is_warned_follows_what_the_node_proves_never_the_alert_labels(
    tmp_path: Path, workloads, actuator_factory
) -> None:
    """A forged `project` (and `user`) label chose the other project's contact, and the
    delivery counted; now the node's project mapping decides, and the labels are audited
    as disagreeing."""
    import getpass

    from tests.helpers.actuator import alert_for, payload

    me = getpass.getuser()
    owners = tmp_path / "owners.yml"
    owners.write_text(
        "users:\n  victim-user: {name: Victim, wecom: victim-user}\n"
        "projects:\n  vision: {name: Vision on-call, wecom: vision-oncall}\n"
        "  victim: {name: Victim on-call, wecom: victim-oncall}\n"
    )
    projects = tmp_path / "projects.yml"
    projects.write_text(f"projects:\n  - name: vision\n    users: [{me}]\n")
    with robot("wecom") as wecom:
        actuator = actuator_factory(
            workloads.node_dir,
            node={"projects_file": str(projects)},
            notice={"required": True},
            notifier={"directory": str(owners), "wecom": {"url": wecom.url}},
        )
        w = workloads.spawn()
        forged = alert_for(w, project="victim", user="victim-user", gpu="7")
        assert actuator.post(payload(forged)).status_code == 200
        case = actuator.wait_state(w, "reclaimed", "refused", "failed", timeout=30)
        assert case["state"] == "reclaimed", case
        mentions = [r["markdown"]["content"].rsplit("\n", 1)[-1] for r in wecom.received]
    assert mentions and set(mentions) == {"<@vision-oncall>"}, mentions
    audit = [
        json.loads(line) for line in (actuator.workdir / "audit.jsonl").read_text().splitlines()
    ]
    (notified,) = [r for r in audit if r.get("to") == "notified"]
    assert notified["alert_disagrees"]["project"] == {"alert": "victim", "node": "vision"}
    assert notified["alert_disagrees"]["gpu"] == {"alert": "7", "node": "0"}
    (sent,) = [r for r in audit if r.get("event") == "notice"]
    assert "project Vision on-call" in sent["detail"], sent


# -- untrusted text is data in every channel --------------------------------------------

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<!channel> <!here> <!everyone> <@U0ADMIN> <#C0GENERAL>",
    '<@all> @all <font color="warning">urgent</font>',
    "[click me](http://evil.example/login) ![pixel](http://evil.example/p.png)",
    "<http://evil.example|your job> http://evil.example www.evil.example",
    "**bold** _it_ ~strike~ # heading\n> quote\n- item",
    "`code` ``` fence",
    "train\u202egnp.exe\u202c \u2066isolate\u2069 zero\u200bwidth",
    "line one\r\nline two\x00nul\x1b[31mansi\x7f",
    "&lt;script&gt; &amp; &",
    "{{ 7*7 }} {% if 1 %}jinja{% endif %}",
    "x" * 5000,
]
LIVE_LINK = re.compile(r"https?://|www\.", re.IGNORECASE)


def _outside_code(markdown_text: str) -> str:
    """The Markdown with its inline code spans removed: what a chat client would format."""
    return re.sub(r"`[^`\n]*`", "", markdown_text)


def _hostile_notice(text: str) -> Notice:
    return notice(
        program=text,
        cmdline=text,
        project=text,
        user=text,
        pod=text,
        namespace=text,
        gpu_model=text,
    )


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda t: t[:20])
@pytest.mark.parametrize("contact", [LILEI, BOB], ids=["zh-CN", "en"])
@pytest.mark.parametrize("kind", ["warning", "reclaimed"])
@pytest.mark.reliability(48)
def test_untrusted_text_is_rendered_as_data_in_every_channel(
    hostile: str, contact: Contact, kind: str
) -> None:
    """A process name (or user, project, pod, display name) carrying HTML, a Slack
    broadcast, a WeCom mention, links, images, bidi overrides or control characters shows
    as text in every channel: no live markup, mention, link or image survives."""
    hostile_contact = contact.model_copy(update={"name": hostile})
    message = Renderer().render(
        dataclasses.replace(_hostile_notice(hostile), kind=kind), hostile_contact, NOW
    )
    everything = [
        message.subject,
        message.text,
        message.markdown,
        message.subject_markdown,
        message.slack,
        message.subject_slack,
        message.html,
    ]
    for rendered in everything:
        assert not any(c in untrusted.BIDI_CONTROLS for c in rendered)
        assert not any(unicodedata.category(c) == "Cc" and c != "\n" for c in rendered)
        assert "x" * 301 not in rendered  # capped
    assert "\n" not in message.subject
    # Chat Markdown (WeCom, DingTalk): outside code spans no tag, mention, link or image.
    for md in (message.markdown, message.subject_markdown):
        live = _outside_code(md)
        assert not re.search(r"[<>]|\]\(|!\[|@all|bold\*\*|&lt;", live), live
        assert not LIVE_LINK.search(live), live
    # Slack mrkdwn: the only angle brackets are escaped ones; no broadcast, link or mention.
    for mrkdwn in (message.slack, message.subject_slack):
        assert "<" not in mrkdwn and ">" not in mrkdwn, mrkdwn
        assert not LIVE_LINK.search(_outside_code(mrkdwn)), mrkdwn
    # E-mail HTML: only the tags the template itself makes, no attributes but the page's.
    tags = set(re.findall(r"<\s*([a-zA-Z][\w-]*)", message.html))
    assert tags <= {"html", "head", "meta", "title", "body", "p", "strong", "code", "ul", "li"}
    assert not re.search(r"<[^>]*\son\w+\s*=", message.html), message.html
    shown = re.sub(r"<code>.*?</code>|<title>.*?</title>", "", message.html, flags=re.S)
    assert not LIVE_LINK.search(shown), shown  # the title is text, never a link
    # Every channel's request body, as sent.
    wecom = WeComChannel("http://127.0.0.1:9/").payload(message, hostile_contact)
    content = wecom["markdown"]["content"]
    assert (
        re.findall(r"<@[^>]*>", content) == [f"<@{contact.wecom}>"]
        if contact.wecom
        else re.findall(r"<@[^>]*>", content) == []
    )
    slack = SlackChannel("http://127.0.0.1:9/").payload(message, hostile_contact)
    section = slack["blocks"][1]["text"]["text"]
    assert re.findall(r"<[^>]*>", section) == ([f"<@{contact.slack}>"] if contact.slack else [])
    assert "<" not in slack["text"]
    feishu = FeishuChannel("http://127.0.0.1:9/").payload(message, hostile_contact)
    (post,) = feishu["content"]["post"].values()
    assert {e["tag"] for line in post["content"] for e in line} <= {"at", "text"}


@pytest.mark.parametrize("kind", ["warning", "idle", "reclaimed"])
def test_every_notice_links_its_evidence_picture_in_both_languages(kind: str) -> None:
    url = "https://reclaimer.example.com/evidence/abc.png"
    for contact in (LILEI, BOB):
        message = Renderer().render(
            notice(kind=kind, picture_url=url, picture_png=b"\x89PNG"), contact, NOW
        )
        assert url in message.text and url in message.markdown and url in message.slack
        assert message.picture == b"\x89PNG"
        without = Renderer().render(notice(kind=kind), contact, NOW)
        assert "/evidence/" not in without.text and without.picture == b""
        # The mail's HTML shows the picture only where the mail carries it.
        assert '<img src="cid:p1@x"' in message.html_with("p1@x") and "<img" not in message.html
