"""The owner's path through the whole stack: real exporter, Prometheus with the shipped
rules, Alertmanager with the reference routes, the actuator, an SMTP server (aiosmtpd), an
OpenLDAP (slapd) holding the owner, and a browser (headless Chromium).

Two idle jobs of the same owner (found in LDAP, Chinese, Asia/Shanghai): the rules flag both,
the actuator mails a warning for each; the owner opens one mail's link and keeps that job for
4 h; the other job is left alone, reclaimed after the grace, and a follow-up mail says so."""

from __future__ import annotations

import getpass
import re
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from actuator.demo.stack import Stack, StackOptions
from tests.helpers.mail import Inbox
from tests.helpers.slapd import PEOPLE, READER_DN, READER_PASSWORD, slapd
from tests.support import free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_one_job_is_kept_from_the_mail_link_the_other_is_reclaimed_with_a_follow_up(
    system_tools: None, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    from tests.helpers.browser import chromium

    inbox = Inbox()
    smtp_port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=smtp_port)
    controller.start()
    try:
        with slapd(tmp_path / "slapd") as ldap:
            ldap.add_person(
                getpass.getuser(),
                displayName="李雷",
                mail="lilei@example.com",
                preferredLanguage="zh-CN",
            )
            password = tmp_path / "ldap-password"
            password.write_text(READER_PASSWORD)
            policy = {
                "defaults": {"grace": "30s"},
                "notifier": {
                    "directory": None,
                    "wecom": None,  # the owner comes from LDAP, by mail
                    "ldap": {
                        "url": ldap.url,
                        "base": PEOPLE,
                        "bind_dn": READER_DN,
                        "password_file": str(password),
                        "timezone": "Asia/Shanghai",
                    },
                    "email": {
                        "host": "127.0.0.1",
                        "port": smtp_port,
                        "security": "none",
                        "sender": "gpu-reclaimer@example.com",
                    },
                },
            }
            options = StackOptions(workdir=tmp_path, policy=policy, grace=30.0)
            with Stack(options) as stack, chromium() as browser:
                stack.wait_scraped()
                kept = stack.spawn("kept", phases="busy=2s,idle", gpu=0, memory="4GiB")
                left = stack.spawn("left", phases="busy=2s,idle", gpu=1, memory="2GiB")
                # The owner acts on the warning when it arrives (inside its grace), whenever
                # the other job's warning comes.
                wait_until(lambda: inbox.about(kept.pid, "将于"), 150)
                (warning,) = inbox.about(kept.pid, "将于")
                (link,) = re.findall(
                    r"http://127\.0\.0\.1:\d+/keep/[\w.-]+\?lang=zh-CN&tz=Asia/Shanghai", warning
                )
                browser.get(link)
                browser.find_element(By.ID, "keep-4h").click()
                assert (
                    WebDriverWait(browser, 15)
                    .until(lambda b: b.find_element(By.ID, "done"))
                    .text.startswith("已保留到")
                )

                def state(w: Any) -> str:
                    cases = stack.actuator_api("/api/v1/cases", pid=w.pid)["cases"]
                    return str(cases[0]["state"]) if cases else ""

                assert state(kept) == "snoozed"
                wait_until(lambda: inbox.about(left.pid, "将于"), 150)
                wait_until(lambda: state(left) == "reclaimed", 90)
                wait_until(lambda: inbox.about(left.pid, "已回收"), 30)
                assert kept.alive() and not left.alive()
                (followup,) = inbox.about(left.pid, "已回收")
                assert "释放显存 2.0 GiB" in followup
    finally:
        controller.stop()
