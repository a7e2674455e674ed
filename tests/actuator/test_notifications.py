"""Owner notices: the directory's fallbacks, the messages in both languages, and every
channel against a real receiver (an SMTP server, aiosmtpd; local robot endpoints that check
each service's documented format and signature)."""

from __future__ import annotations

import dataclasses
import email
import email.policy
import json
import re
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from actuator import untrusted
from actuator.channels import (
    DingTalkChannel,
    EmailChannel,
    FeishuChannel,
    SlackChannel,
    WeComChannel,
)
from actuator.config import ConfigError, load_config
from actuator.live import power_share
from actuator.messages import Price, Renderer
from actuator.notice import Notice
from actuator.notify import OwnerNotifier
from actuator.owners import Contact, DirectoryError, OwnerDirectory
from exporter.nvml_reader import GpuProcessReading, GpuReading
from tests.helpers.notices import BOB, LILEI, NOW, GiB, notice
from tests.helpers.robots import robot
from tests.support import free_port

# -- the directory ----------------------------------------------------------------------


def test_a_missing_owner_falls_back_to_the_project_then_the_sre_route() -> None:
    directory = OwnerDirectory(
        users={"lilei": LILEI, "mute": Contact(name="no address")},
        projects={"vision": Contact(name="Vision on-call", email="vision@example.com")},
        sre=Contact(name="GPU SRE", slack="S0SRE"),
    )
    assert directory.resolve("lilei", "vision", {"email", "wecom"}).via == "user"
    assert directory.resolve("lilei", "vision", {"wecom"}).channels == ("wecom",)
    assert directory.resolve("nobody", "vision", {"email"}).via == "project"
    assert directory.resolve("mute", "vision", {"email"}).via == "project"  # no address
    assert directory.resolve("nobody", "other", {"email", "slack"}).via == "sre"
    assert directory.resolve("nobody", "other", {"email"}) is None  # never silently nobody


def test_a_directory_file_with_a_mistake_names_it(tmp_path: Path) -> None:
    path = tmp_path / "owners.yml"
    path.write_text("users:\n  alice: {email: alice@example.com, timezone: Mars/Olympus}\n")
    with pytest.raises(
        DirectoryError, match=r"(?s)owners.yml.*users.alice.timezone: .*unknown time zone .Mars"
    ):
        OwnerDirectory.load(path)


# -- the messages -----------------------------------------------------------------------


def test_the_chinese_warning_says_what_why_when_and_how_to_keep_it() -> None:
    message = Renderer(sre="GPU 运维（企业微信群 GPU-help）").render(notice(), LILEI, NOW)
    assert message.subject == (
        "[GPU 回收] gpu-node-3 GPU 2 上的 python train_yolo.py（PID 31337）将于 "
        "2026-12-01 14:10 被回收"
    )
    text = message.text
    assert "李雷，您好" in text and "已持续 7 分钟无活动，是否仍在进行？" in text
    assert "占用 18.0 GiB 显存" in text
    assert "自 2026-12-01 13:53 起无日志或心跳写入" in text  # the owner's time zone
    assert "2026-12-01 14:10（Asia/Shanghai）发送 SIGTERM，10 秒后仍未退出则 SIGKILL" in text
    assert "联系 GPU 运维（企业微信群 GPU-help），注明工单号 42" in text
    assert "心跳" in text.splitlines()[-1]  # how to avoid it next time
    assert "<strong>" in message.html and 'lang="zh-CN"' in message.html


def test_a_notice_says_what_the_idle_time_cost_where_the_gpu_reports_power() -> None:
    """350 W shared to this process for 3 h idle: 1.05 kWh, at ¥0.8 per kWh ¥0.84; without
    a price the energy only; without power from the driver, nothing (never a made-up 0)."""
    idle_3h = notice(power_watts=350.0, since=NOW - 3 * 3600)
    priced = Renderer(price=Price(0.8, "¥"))
    assert (
        "已持续 180 分钟无活动（至今约耗电 1.05 kWh, ¥0.84），"
        in priced.render(idle_3h, LILEI, NOW).text
    )
    assert "for 180 minutes (about 1.05 kWh so far)." in Renderer().render(idle_3h, BOB, NOW).text
    unknown = Renderer(price=Price(0.8, "¥")).render(notice(since=NOW - 3 * 3600), BOB, NOW)
    assert "for 180 minutes. Is it still working?" in unknown.text and "kWh" not in unknown.text


def test_a_process_is_charged_the_share_of_power_its_memory_holds() -> None:
    gpu = GpuReading(
        index=0,
        uuid="GPU-0",
        name="NVIDIA H100 80GB HBM3",
        memory_total=80 * GiB,
        memory_used=40 * GiB,
        utilization=0.0,
        process_util_supported=True,
        processes=(GpuProcessReading(1, 30 * GiB, 0.0), GpuProcessReading(2, 10 * GiB, 0.0)),
        power_watts=400.0,
    )
    assert power_share(gpu, 30 * GiB) == 300.0
    assert power_share(dataclasses.replace(gpu, power_watts=None), 30 * GiB) is None
    partly_unknown = (GpuProcessReading(1, 30 * GiB, 0.0), GpuProcessReading(2, None, 0.0))
    assert power_share(dataclasses.replace(gpu, processes=partly_unknown), 30 * GiB) is None


def test_the_english_warning_and_the_follow_up(tmp_path: Path) -> None:
    renderer = Renderer()
    stalled = renderer.render(notice(alertname="GpuProcessStalled"), BOB, NOW)
    assert stalled.subject.startswith("[GPU reclaim] python train_yolo.py (PID 31337)")
    assert "at 2026-12-01 07:10" in stalled.subject  # Berlin
    assert "heartbeat and log have not moved since 2026-12-01 06:53" in stalled.text
    assert "as in an NCCL hang" in stalled.text and "the GPU SRE team" in stalled.text
    done = renderer.render(notice(kind="reclaimed", freed_bytes=18 * GiB), BOB, NOW)
    assert (
        "was reclaimed" in done.subject
        and "18.0 GiB of GPU memory was freed (case 42)" in done.text
    )
    # A site template of the same name wins.
    site = tmp_path / "templates"
    site.mkdir()
    (site / "warning.en.md.j2").write_text(
        "{% set subject %}Site: case {{ case }}{% endset %}Ours: {{ command }} until "
        "{{ deadline }}\n"
    )
    mine = Renderer(site).render(notice(), BOB, NOW)
    assert (
        mine.subject == "Site: case 42"
        and mine.text == "Ours: python train_yolo.py until 2026-12-01 07:10\n"
    )


# -- email ------------------------------------------------------------------------------


@dataclass
class Inbox:
    messages: list[email.message.EmailMessage] = field(default_factory=list)
    envelopes: list[Any] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append(parsed)  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


def _authenticator(
    server: Any, session: Any, envelope: Any, mechanism: str, data: Any
) -> AuthResult:
    ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
        b"reclaimer",
        b"s3cret",
    )
    return AuthResult(success=ok, handled=False)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    from tests.helpers.certs import self_signed

    return self_signed(tmp_path)


@pytest.fixture
def smtp_server(certificate: tuple[Path, Path]) -> Iterator[tuple[Inbox, int, Path]]:
    import ssl

    key, cert = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    inbox = Inbox()
    port = free_port()
    controller = Controller(
        inbox,
        hostname="127.0.0.1",
        port=port,
        tls_context=context,
        require_starttls=True,
        authenticator=_authenticator,
        auth_require_tls=True,
    )
    controller.start()
    try:
        yield inbox, port, cert
    finally:
        controller.stop()


def test_mail_goes_over_starttls_with_auth_as_text_and_html(smtp_server) -> None:
    inbox, port, cert = smtp_server
    channel = EmailChannel(
        "127.0.0.1",
        port,
        "gpu-reclaimer@example.com",
        security="starttls",
        username="reclaimer",
        password="s3cret",
        ca_file=str(cert),
    )
    message = Renderer().render(notice(), LILEI, NOW)
    result = channel.send(message, LILEI)
    assert result.delivered, result.detail
    (mail,) = inbox.messages
    assert inbox.envelopes[0].rcpt_tos == ["lilei@example.com"]
    assert mail["Subject"] == message.subject and mail["Content-Language"] == "zh-CN"
    assert mail.get_content_type() == "multipart/alternative"
    plain = mail.get_body(("plain",)).get_content()
    html = mail.get_body(("html",)).get_content()
    assert "是否仍在进行" in plain and "**" not in plain
    assert "<strong>" in html and "31337" in html


def test_a_long_chinese_subject_keeps_every_space_through_smtp() -> None:
    """Python's own header folding dropped the space where it split encoded words: a
    subject read "（PID12226）". Every split point is tried; each encoded word stays within
    RFC 2047's 75 characters."""
    import email
    import io
    import re
    from email.generator import BytesGenerator

    channel = EmailChannel("127.0.0.1", 25, "gpu-reclaimer@example.com", security="none")
    base = Renderer().render(notice(), LILEI, NOW)
    for pad in range(40):
        subject = f"[GPU 回收] {'n' * pad} GPU  上的 yolo（PID 12226）将于 2026-12-01 21:44 被回收"
        mail = channel.compose(dataclasses.replace(base, subject=subject), LILEI)
        out = io.BytesIO()  # as smtplib.send_message writes it
        BytesGenerator(out, policy=mail.policy.clone(linesep="\r\n")).flatten(mail)
        raw = out.getvalue()
        assert email.message_from_bytes(raw, policy=email.policy.default)["Subject"] == subject
        assert all(len(w) <= 75 for w in re.findall(rb"=\?utf-8\?b\?[^?]*\?=", raw))


def test_mail_with_a_wrong_password_or_an_untrusted_certificate_is_not_delivered(
    smtp_server, tmp_path: Path
) -> None:
    inbox, port, cert = smtp_server
    message = Renderer().render(notice(), LILEI, NOW)
    wrong = EmailChannel(
        "127.0.0.1",
        port,
        "r@example.com",
        username="reclaimer",
        password="guess",
        ca_file=str(cert),
    ).send(message, LILEI)
    assert not wrong.delivered and "SMTPAuthenticationError" in wrong.detail
    untrusted = EmailChannel(
        "127.0.0.1", port, "r@example.com", username="reclaimer", password="s3cret"
    ).send(message, LILEI)
    assert not untrusted.delivered and "CERTIFICATE_VERIFY_FAILED" in untrusted.detail
    assert not inbox.messages


# -- the chat robots --------------------------------------------------------------------


def test_wecom_gets_markdown_that_mentions_the_owner() -> None:
    message = Renderer().render(notice(), LILEI, NOW)
    with robot("wecom") as wecom:
        assert WeComChannel(wecom.url).send(message, LILEI).delivered, wecom.refused
        (body,) = wecom.received
    content = body["markdown"]["content"]
    assert content.startswith(f"**{message.subject_markdown}**") and content.endswith("<@lilei>")
    long = Renderer().render(notice(program="x" * 5000), LILEI, NOW)
    with robot("wecom") as wecom:  # cut to the robot's 4096 bytes, the mention kept
        assert WeComChannel(wecom.url).send(long, LILEI).delivered, wecom.refused
        assert wecom.received[0]["markdown"]["content"].endswith("<@lilei>")


@pytest.mark.parametrize("secret", [None, "SECdingtalk-secret"])
def test_dingtalk_signed_and_unsigned(secret: str | None) -> None:
    message = Renderer().render(notice(), LILEI, NOW)
    with robot("dingtalk", secret) as ding:
        result = DingTalkChannel(ding.url, secret=secret).send(message, LILEI)
        assert result.delivered, (result.detail, ding.refused)
        (body,) = ding.received
    assert body["at"] == {"atUserIds": ["lilei-dt"], "isAtAll": False}
    assert body["markdown"]["title"] == message.subject
    assert body["markdown"]["text"].endswith("@lilei-dt")


def test_dingtalk_and_feishu_refuse_a_wrong_secret_and_it_is_not_delivered() -> None:
    message = Renderer().render(notice(), LILEI, NOW)
    with robot("dingtalk", "right") as ding:
        result = DingTalkChannel(ding.url, secret="wrong").send(message, LILEI)
        assert not result.delivered and "310000" in result.detail
    with robot("feishu", "right") as feishu:
        result = FeishuChannel(feishu.url, secret="wrong").send(message, LILEI)
        assert not result.delivered and "19021" in result.detail
    with robot("feishu", "right") as feishu:  # a clock an hour off: stale timestamp
        late = FeishuChannel(feishu.url, secret="right", clock=lambda: time.time() - 7200)
        assert not late.send(message, LILEI).delivered


@pytest.mark.parametrize("secret", [None, "feishu-secret"])
def test_feishu_gets_a_post_with_the_owner_mentioned(secret: str | None) -> None:
    message = Renderer().render(notice(), LILEI, NOW)
    with robot("feishu", secret) as feishu:
        result = FeishuChannel(feishu.url, secret=secret).send(message, LILEI)
        assert result.delivered, (result.detail, feishu.refused)
        (body,) = feishu.received
    post = body["content"]["post"]["zh_cn"]
    assert post["title"] == message.subject
    assert post["content"][0] == [{"tag": "at", "user_id": "ou_lilei"}]
    assert any("是否仍在进行" in line[0]["text"] for line in post["content"][1:])


def test_slack_gets_block_kit_with_the_owner_mentioned() -> None:
    message = Renderer().render(notice(user="bob"), BOB, NOW)
    with robot("slack") as slack:
        assert SlackChannel(slack.url).send(message, BOB).delivered, slack.refused
        (body,) = slack.received
    header, section = body["blocks"]
    assert header["text"]["text"] == message.subject[:150]
    assert section["text"]["text"].startswith("<@U024BOB> *Hello Bob,*")
    assert body["text"] == message.subject_slack


# -- the notifier -----------------------------------------------------------------------


def test_the_owner_notifier_tries_each_channel_and_says_which_worked() -> None:
    directory = OwnerDirectory(users={"lilei": LILEI}, sre=Contact(slack="S0SRE"))
    with robot("wecom") as wecom, robot("dingtalk", "right") as ding:
        channels = {
            "wecom": WeComChannel(wecom.url),
            "dingtalk": DingTalkChannel(ding.url, secret="wrong"),
        }
        notifier = OwnerNotifier(directory, channels, Renderer(), clock=lambda: NOW)
        result = notifier.send(notice(), dry_run=False)
        assert result.delivered  # WeCom took it; DingTalk refused the signature
        assert (
            "wecom delivered" in result.detail
            and "dingtalk failed: errcode 310000" in result.detail
        )
        assert not notifier.send(notice(), dry_run=True).delivered  # nothing sent
        assert len(wecom.received) == 1
        nobody = notifier.send(notice(user="ghost", project="none"), dry_run=False)
    assert not nobody.delivered and "nobody to tell" in nobody.detail  # SRE has no wecom


def test_a_repeat_step_copies_the_project_contact_and_the_notice_says_why() -> None:
    """The owner's 3rd reclaim in 30 days under a step with `copy_project`: the owner is
    told (the gate), and the project's contact gets the same notice in their language."""
    vision = Contact(name="Vision on-call", wecom="vision-oncall", language="en")
    directory = OwnerDirectory(users={"lilei": LILEI}, projects={"vision": vision})
    repeat = notice(
        repeat_prior=3,
        repeat_window=30 * 86400,
        copy_project=True,
        grace=120.0,
        keep_needs_sre=True,
    )
    with robot("wecom") as wecom:
        notifier = OwnerNotifier(
            directory, {"wecom": WeComChannel(wecom.url)}, Renderer(), clock=lambda: NOW
        )
        result = notifier.send(repeat, dry_run=False)
        once = notifier.send(notice(), dry_run=False)  # no step applies: the owner only
    assert result.delivered and "copied to project Vision on-call: wecom delivered" in result.detail
    assert "copied" not in once.detail
    owner, copy, _ = wecom.received
    told = "您的任务在最近 30 天内已被回收 3 次：宽限期为 2 分钟，并抄送项目负责人；"
    assert told + "保留任务需经运维团队批准。" in owner["markdown"]["content"]
    assert "Your jobs were reclaimed 3 times in the last 30 days" in copy["markdown"]["content"]


def test_config_names_what_is_missing(tmp_path: Path) -> None:
    owners = tmp_path / "owners.yml"
    owners.write_text("users: {}\n")
    cases = {
        "notifier: {wecom: {url: http://x}}": "owner channels need notifier.directory",
        f"notifier: {{directory: {owners}}}": "needs at least one channel",
        f"notifier: {{directory: {owners}, email: {{host: h, sender: nope}}}}": "sender",
    }
    for text, message in cases.items():
        path = tmp_path / "actuator.yml"
        path.write_text(text + "\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path)


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
    audit = [
        json.loads(line) for line in (actuator.workdir / "audit.jsonl").read_text().splitlines()
    ]
    (notified,) = [r for r in audit if r.get("to") == "notified"]
    assert notified["alert_disagrees"]["command"] == {
        "alert": "python train.py",
        "node": "exporter.cli",
    }
    (sent,) = [r for r in audit if r.get("event") == "notice"]
    assert sent["delivered"] and "wecom delivered" in sent["detail"]
    (told,) = [r for r in audit if r.get("event") == "followup"]
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
