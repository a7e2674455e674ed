"""The owner notifier: each channel of the owner's tried in turn, which worked said; a
repeat step copies the project's contact; a config without a way to reach anyone is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from actuator.config import ConfigError, load_config
from actuator.notifications.channels import (
    DingTalkChannel,
    WeComChannel,
)
from actuator.notifications.messages import Renderer
from actuator.notifications.notify import OwnerNotifier
from actuator.notifications.owners import Contact, OwnerDirectory
from tests.helpers.notices import LILEI, NOW, notice
from tests.helpers.robots import robot


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
    copied = copy["markdown"]["content"]
    # Addressed to the contact about the owner's process, never as if it were theirs.
    assert "lilei's jobs were reclaimed 3 times in the last 30 days" in copied
    assert "lilei's process" in copied and "Your process" not in copied
    assert "you get this copy as the project's contact" in copied


def test_the_first_notice_under_demand_is_copied_with_the_line_that_says_why() -> None:
    vision = Contact(name="Vision on-call", wecom="vision-oncall", language="en")
    directory = OwnerDirectory(users={"lilei": LILEI}, projects={"vision": vision})
    first = notice(
        kind="idle", repeat_prior=2, repeat_window=30 * 86400, copy_project=True, grace=120.0
    )
    with robot("wecom") as wecom:
        notifier = OwnerNotifier(
            directory, {"wecom": WeComChannel(wecom.url)}, Renderer(), clock=lambda: NOW
        )
        assert notifier.send(first, dry_run=False).delivered
    owner, copy = wecom.received
    assert "最近 30 天内已被回收 2 次" in owner["markdown"]["content"]
    assert "lilei's jobs were reclaimed 2 times in the last 30 days" in copy["markdown"]["content"]


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


class _Broken:
    """A channel that breaks its contract (it raises instead of answering): a defect, or an
    answer nobody foresaw, as a robot's JSON list once was."""

    name = "slack"

    def send(self, message: object, contact: object) -> object:
        raise AttributeError("'list' object has no attribute 'get'")


def test_a_channel_that_raises_fails_alone_and_the_notice_still_has_an_outcome() -> None:
    """The owner's other channel delivers, and the outcome says which failed and why; had
    the exception escaped, the notice's outcome would go unrecorded and the notice be sent
    again at every pass, on the channel that delivered too."""
    directory = OwnerDirectory(users={"lilei": LILEI}, sre=Contact(slack="S0SRE"))
    with robot("wecom") as wecom:
        channels = {"wecom": WeComChannel(wecom.url), "slack": _Broken()}
        notifier = OwnerNotifier(directory, channels, Renderer(), clock=lambda: NOW)  # type: ignore[dict-item]
        result = notifier.send(notice(), dry_run=False)
        assert result.delivered and len(wecom.received) == 1
    assert "slack failed: the channel raised AttributeError" in result.detail
    alone = OwnerNotifier(directory, {"slack": _Broken()}, Renderer(), clock=lambda: NOW)  # type: ignore[dict-item]
    failed = alone.send(notice(), dry_run=False)
    assert not failed.delivered and "raised AttributeError" in failed.detail
