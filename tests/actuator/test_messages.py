"""The pieces a notice is rendered from: sizes, durations and windows in the owner's
language, the idle energy line, a site template's typo failing loudly, and the mail's HTML
part, which never passes raw HTML through (the renderer's full notices are in
test_notifications.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jinja2
import pytest

from actuator.live import power_share
from actuator.notifications.messages import (
    Message,
    Price,
    Renderer,
    duration,
    idle_energy,
    size,
    span,
)
from actuator.notifications.owners import Contact
from exporter.nvml_reader import GpuProcessReading, GpuReading
from tests.helpers.notices import BOB, LILEI, NOW, GiB, notice


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


@pytest.mark.parametrize(("prior", "said"), [(1, "reclaimed once in"), (2, "reclaimed 2 times in")])
def test_the_repeat_line_counts_in_words_people_write(prior: int, said: str) -> None:
    repeat = notice(repeat_prior=prior, repeat_window=30 * 86400, grace=120.0)
    assert said in Renderer().render(repeat, BOB, NOW).text


@pytest.mark.parametrize("contact", [BOB, LILEI], ids=["en", "zh-CN"])
def test_the_products_own_words_keep_their_markup_only_the_users_are_neutralised(
    contact: Contact,
) -> None:
    """A waiter's name is the user's text; how they wait is the template's. The product's
    backticks stay backticks (code in chat), the name's become look-alikes."""
    demand = notice(waiting="carol`s <@all>", waiting_through="wait")
    message = Renderer().render(demand, contact, NOW)
    assert "`gpu-reclaimer wait`" in message.markdown and "`gpu-reclaimer wait`" in message.slack
    assert "\u02b9gpu-reclaimer wait" not in message.markdown
    assert "`carol\u02b9s \u2039@all\u203a`" in message.markdown  # the user's: one inert span
    assert (
        "gpu-reclaimer wait"
        not in Renderer()
        .render(notice(waiting="Slurm job 42 of carol", waiting_through="slurm"), contact, NOW)
        .text
    )


@pytest.mark.parametrize("kind", ["idle", "warning"])
def test_a_services_notice_says_it_is_a_service_and_what_that_means(kind: str) -> None:
    contact = BOB
    said = (
        Renderer().render(notice(kind=kind, service=True, service_window=3600.0), contact, NOW).text
    )
    assert "It is a service: its alert calls it one" in said  # no node evidence given
    assert "not reclaimed for being quiet between requests" in said
    assert "served nothing for 1 h or more" in said
    zh = Renderer().render(notice(kind=kind, service=True, service_window=3600.0), LILEI, NOW)
    assert "这是一个服务" in zh.text
    plain = Renderer().render(notice(kind=kind), contact, NOW).text
    assert "It is a service" not in plain
    assert "no data on its connections beyond keep-alive" in plain


@pytest.mark.reliability(67)
@pytest.mark.parametrize("kind", ["idle", "warning"])
def test_a_services_notice_names_the_evidence_that_made_it_one(kind: str) -> None:
    """Issue 57: the owner reads what the node saw, in their language."""

    def said(contact, **evidence: object) -> str:  # type: ignore[no-untyped-def]
        made = notice(kind=kind, service=True, service_window=3600.0, **evidence)
        return Renderer().render(made, contact, NOW).text

    assert "2 client connection(s) were open to it on port 8000" in said(
        BOB, service_by="clients", service_ports=(8000,), service_clients=2
    )
    assert "a client was connected to it on port 8000 12 min before" in said(
        BOB, service_by="client", service_ports=(8000,), service_client_ago=720.0
    )
    unproven = said(BOB, service_by="unproven", service_ports=(6006,), service_watched=1200.0)
    assert "port 6006 where other hosts reach it" in unproven
    assert "watched it for 20 min of the 1 h that would prove no client comes" in unproven
    assert "which your project names a service port" in said(
        BOB, service_by="declared", service_ports=(8888,)
    )
    assert "端口 8000 上有 2 个客户端连接" in said(
        LILEI, service_by="clients", service_ports=(8000,), service_clients=2
    )


@pytest.mark.parametrize("contact", [BOB, LILEI])
def test_the_suspended_notice_says_the_work_is_kept_and_how_to_resume_it(
    contact: Contact,
) -> None:
    told = Renderer().render(
        notice(kind="suspended", freed_bytes=18 * GiB, keep_url="https://gpu.example/keep/x"),
        contact,
        NOW,
    )
    if contact is BOB:
        assert "was suspended: its work is kept" in told.subject
        assert "its 18.0 GiB of GPU memory was saved into its host memory" in told.text
        assert "run gpu-reclaimer keep 31337 --for 4h on gpu-node-3" in told.text  # plain text
        assert "it is stopped at 2026-12-01 07:10" in told.text  # the notice's deadline
    else:
        assert (
            "已挂起，工作进度保留" in told.subject
            and "18.0 GiB 显存内容已存入主机内存" in told.text
        )
    assert "https://gpu.example/keep/x" in told.text


@pytest.mark.parametrize("contact", [BOB, LILEI])
def test_the_restore_notice_says_where_the_owners_resume_stands(contact: Contact) -> None:
    """Waiting for room (first in line, stopped at the deadline if still suspended), a
    refused try (n of 5), the end of the suspension (why); the detail, which carries the
    node's GPU names, is escaped like any untrusted text."""

    def said(news: str, detail: str, tries: int = 0):  # type: ignore[no-untyped-def]
        told = notice(kind="restore", freed_bytes=4 * GiB)
        told = dataclasses.replace(
            told, restore=news, restore_detail=detail, restore_try=tries, restore_tries=5
        )
        return Renderer().render(told, contact, NOW)

    room = "no room on GPU 0: 2.0 GiB free, 4.0 GiB needed, on the <b>H100</b>"
    waiting = said("waiting", room)
    refused = said("refused", "the driver refused the restore", 2)
    stopping = said("stopping", "suspended for 24 h, never resumed: the ladder goes on")
    assert "<b>H100</b>" not in waiting.html and "H100" in waiting.html  # no markup of theirs
    if contact is BOB:
        assert "still suspended, no GPU has room for it yet" in waiting.subject
        assert "no room on GPU 0: 2.0 GiB free, 4.0 GiB needed" in waiting.text
        assert "first in line" in waiting.text and "it is stopped" in waiting.text
        assert "2026-12-01 07:10" in waiting.text  # the suspension's deadline
        assert "(try 2 of 5)" in refused.subject and "after try 5 it is stopped" in refused.text
        assert "being stopped now" in stopping.text and "never resumed" in stopping.text
    else:
        assert "暂无 GPU 有足够空间" in waiting.subject and "排在队首" in waiting.text
        assert "第 2 次，共 5 次" in refused.subject
        assert "任务现在将被停止" in stopping.text


@pytest.mark.reliability(74)
def test_the_warning_says_what_the_node_saw_of_its_owner_where_presence_holds_it() -> None:
    """Issue 59: "you were logged in on pts/3, idle 4 min", in the owner's language, only
    where a rule lets presence hold the reclaim, and never a terminal idle past presence_idle."""
    seen = {
        "owner_terminal": "pts/3",
        "owner_terminal_idle": 240.0,
        "owner_notebook_connections": 2,
        "checked_at": NOW,
    }

    def told(contact: Contact, **over: object) -> str:
        return Renderer().render(notice(**(seen | over)), contact, NOW).text

    english = told(BOB, presence_grace=7200.0)
    assert "You are on the node: its check at" in english
    assert "saw a login on pts/3, idle 4 min, and 2 connection(s) to the notebook server" in (
        english
    )
    assert "The reclaim waits while you are, up to 2 h past" in english
    assert "在 pts/3 上的登录，空闲 4 分钟，以及 notebook 服务器上的 2 个连接" in told(
        LILEI, presence_grace=7200.0
    )
    # Presence changes nothing where the rule does not use it: the notice does not promise it.
    assert "on the node: its check" not in told(BOB)
    # A terminal idle past presence_idle is not presence; the connections still are.
    stale = told(BOB, presence_grace=7200.0, owner_terminal_idle=3600.0)
    assert "pts/3" not in stale and "saw 2 connection(s) to the notebook server" in stale
    assert "on the node" not in told(
        BOB, presence_grace=7200.0, owner_terminal_idle=3600.0, owner_notebook_connections=0
    )
    # A session without a terminal's name (ssh without a tty) is presence too, and said so.
    no_tty = told(BOB, presence_grace=7200.0, owner_terminal="", owner_notebook_connections=0)
    assert "its check at" in no_tty and "saw a login, idle 4 min. The reclaim waits" in no_tty
    assert "的检查看到登录，空闲 4 分钟。" in told(
        LILEI, presence_grace=7200.0, owner_terminal="", owner_notebook_connections=0
    )
    # With the suspend rung on, a present owner's job is suspended (its work kept): the
    # warning says so, and that presence holds only the SIGTERM of one that cannot be.
    kept = told(BOB, presence_grace=7200.0, suspend=True)
    assert "it is suspended where the node can checkpoint it" in kept
    assert "If it cannot be suspended, the SIGTERM waits while you are, up to 2 h" in kept
    assert "The reclaim waits" not in kept
    zh = told(LILEI, presence_grace=7200.0, suspend=True)
    assert "将其挂起" in zh and "若不能挂起，在场期间 SIGTERM 会等待" in zh
    assert "it is suspended" not in english and "SIGTERM at" in english
    # The terminal's name is the node's text: a hostile one is escaped like any other.
    hostile = Renderer().render(
        notice(**(seen | {"owner_terminal": "pts/3 **[x](http://evil)**"}), presence_grace=60.0),
        BOB,
        NOW,
    )
    assert "http://evil" not in hostile.html.split("<code>pts/3")[0]  # only inside <code>
    assert 'href="http://evil"' not in hostile.html and "<strong>[x]" not in hostile.html
