"""The owner's whole path in a real browser: the owner is found in LDAP (slapd), the
actuator mails a Chinese warning through a real SMTP server (aiosmtpd) with the evidence
picture drawn from a real Prometheus that scrapes the real exporter, the test opens the
mail's link in headless Chromium (Debian's chromium with its driver, through Selenium),
sees the picture, chooses "keep for 4 h", and the case is snoozed; the page is
screenshotted in both languages (docs/keep-page.*.png come from this test with
GPU_RECLAIMER_SCREENSHOTS=docs)."""

from __future__ import annotations

import getpass
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from aiosmtpd.controller import Controller

from actuator.demo.ruleset import render_deploy
from tests.helpers.actuator import alert_for, payload
from tests.helpers.mail import Inbox
from tests.helpers.prom import background, query, start_prometheus
from tests.helpers.slapd import PEOPLE, READER_DN, READER_PASSWORD, slapd
from tests.support import REPO, free_port, gpu_reclaimer_command, wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def browser() -> Iterator[Any]:
    from tests.helpers.browser import chromium

    with chromium() as driver:
        yield driver


def test_the_owner_keeps_the_job_from_the_mail_link_in_a_browser(
    tmp_path: Path, workloads, actuator_factory, browser
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    inbox = Inbox()
    smtp_port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=smtp_port)
    controller.start()
    shots = Path(os.environ.get("GPU_RECLAIMER_SCREENSHOTS", tmp_path))
    if not shots.is_absolute():
        shots = REPO / shots
    # The exporter on the simulated node, and Prometheus scraping it with the rules (the
    # rules and their windows at 1/15: a 1 s scrape, [4s] windows) for the pictures.
    exporter_port = free_port()
    exporter = [
        *gpu_reclaimer_command(),
        "exporter",
        "--listen",
        f"127.0.0.1:{exporter_port}",
        "--sim-dir",
        str(workloads.node_dir),
    ]
    prom_config = render_deploy(
        REPO,
        tmp_path / "run",
        scale=1 / 15,
        exporters=[f"127.0.0.1:{exporter_port}"],
        actuator=f"127.0.0.1:{free_port()}",
        alertmanagers=[],
    )
    try:
        with (
            background(
                exporter,
                tmp_path / "exporter.log",
                ready=f"http://127.0.0.1:{exporter_port}/metrics",
            ),
            start_prometheus(prom_config, tmp_path / "prom") as prom,
            slapd(tmp_path / "slapd") as ldap,
        ):
            ldap.add_person(
                getpass.getuser(),
                displayName="李雷",
                mail="lilei@example.com",
                preferredLanguage="zh-CN",
            )
            password = tmp_path / "ldap-password"
            password.write_text(READER_PASSWORD)
            actuator = actuator_factory(
                workloads.node_dir,
                start=False,
                server={"graceful_timeout": 1},  # the browser's keep-alive would hold the stop
                defaults={"grace": "60s"},
                notice={"required": True},
                notifier={
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
                    "sre_contact": "GPU 运维",
                },
            )
            config = yaml.safe_load(actuator.config_file.read_text())
            config["notifier"]["public_url"] = actuator.url  # links point at this actuator
            # The test asserts the picture: a loaded machine's slow Prometheus must not cost
            # it (the product's default budget, 5 s, is for a notice waiting in a pass).
            config["notifier"]["evidence"] = {"prometheus": prom.url, "timeout": "30s"}
            config.setdefault("idle", {})["rules_file"] = str(
                tmp_path / "run" / "alert-rules" / "gpu-reclaimer.rules.yml"
            )
            actuator.config_file.write_text(yaml.safe_dump(config))
            actuator.start()
            w = workloads.spawn()
            # Its series in Prometheus before the alert: the picture has something to show.
            held = f'gpu_process_memory_used_bytes{{pid="{w.pid}"}}'
            wait_until(lambda: query(prom.url, held), 30, 0.2)
            alert = alert_for(w, command="python train.py", gpu="0")
            assert actuator.post(payload(alert)).status_code == 200
            wait_until(lambda: inbox.messages, 60)  # the picture may take its 30 s
    finally:
        controller.stop()
    (mail,) = inbox.messages
    assert mail["To"].endswith("<lilei@example.com>") and "将于" in mail["Subject"]
    text = mail.get_body(("plain",)).get_content()
    (link,) = re.findall(r"http://127\.0\.0\.1:\d+/keep/[\w.-]+\?lang=zh-CN&tz=Asia/Shanghai", text)
    # The evidence picture: inline in the mail's HTML, and behind a read-only link in its text.
    html = mail.get_body(("html",)).get_content()
    (cid,) = re.findall(r'<img src="cid:([^"]+)"', html)
    (picture,) = [p for p in mail.walk() if p.get_content_type() == "image/png"]
    assert picture["Content-ID"] == f"<{cid}>"
    png = picture.get_content()
    assert png.startswith(b"\x89PNG") and struct.unpack(">II", png[16:24]) == (640, 600)
    (picture_url,) = re.findall(r"http://127\.0\.0\.1:\d+/evidence/[\w.-]+\.png", text)
    served = requests.get(picture_url, timeout=10)
    assert served.headers["Content-Type"] == "image/png" and served.content == png
    assert requests.get(picture_url[:-6] + "x.png", timeout=10).status_code == 403
    browser.get(link)
    assert "保留 GPU 任务" in browser.title
    # What the node runs as that PID, not what the alert claimed.
    assert "exporter.cli sim run" in browser.page_source and f"(PID {w.pid})" in browser.page_source
    assert "python train.py" not in browser.page_source
    # The picture on the page, loaded by the browser under the page's content policy.
    shown = browser.execute_script(
        "const i = document.getElementById('evidence'); return i.complete && i.naturalWidth;"
    )
    assert shown == 640, shown
    # The deadline in the owner's time zone, with the minutes left.
    assert re.search(
        r" CST（\d+ 分钟后）发送 SIGTERM", browser.page_source
    )  # owner's zone, countdown
    shots.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(shots / "keep-page.zh-CN.png"))
    browser.get(link.replace("lang=zh-CN", "lang=en"))
    browser.save_screenshot(str(shots / "keep-page.en.png"))
    browser.get(link)
    browser.find_element(By.ID, "keep-4h").click()
    done = WebDriverWait(browser, 15).until(lambda b: b.find_element(By.ID, "done")).text
    assert done.startswith("已保留到"), done
    case = actuator.case_for(w)
    assert case is not None and case["state"] == "snoozed", case
    browser.back()
    browser.refresh()  # the same link again: it has acted once
    assert "此链接已使用过" in browser.page_source
    assert w.alive()
