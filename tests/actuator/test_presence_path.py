"""The owner's presence through the whole path: a real pty with a utmp record of its owner's
login session (root here, as the suite runs), a real actuator enforcing with a presence
grace, a real SMTP server. The warning says what the node saw of the owner; past the grace
the reclaim waits (`deferred`, `owner_present`) while they are on the node; once they log
out, the ladder goes on."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from aiosmtpd.controller import Controller

from exporter.presence import USER_PROCESS
from tests.helpers.actuator import alert_for, payload
from tests.helpers.mail import Inbox
from tests.helpers.utmp import utmp_record
from tests.support import free_port, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def login(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A login session of this uid on a real pty: (its utmp file, the terminal's name)."""
    main, follower = os.openpty()
    leader = subprocess.Popen(["sleep", "300"])
    name = os.ttyname(follower).removeprefix("/dev/")
    os.chown(f"/dev/{name}", os.getuid(), -1)  # the terminal is the owner's
    utmp = tmp_path / "utmp"
    utmp.write_bytes(utmp_record(USER_PROCESS, leader.pid, name, "root"))
    try:
        yield utmp, name
    finally:
        leader.kill()
        leader.wait()
        os.close(main)
        os.close(follower)


@pytest.mark.reliability(74)
def test_the_owner_on_the_node_is_told_so_and_holds_the_reclaim_until_they_leave(
    tmp_path: Path, workloads, actuator_factory, login: tuple[Path, str]
) -> None:
    utmp, terminal = login
    inbox, smtp_port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=smtp_port)
    controller.start()
    directory = tmp_path / "owners.yml"
    directory.write_text(yaml.safe_dump({"users": {"root": {"email": "root@example.com"}}}))
    try:
        actuator = actuator_factory(
            workloads.node_dir,
            node={"presence": True, "utmp_file": str(utmp)},
            defaults={"grace": "2s", "presence_grace": "1h"},
            notice={"required": True},
            notifier={
                "directory": str(directory),
                "email": {
                    "host": "127.0.0.1",
                    "port": smtp_port,
                    "security": "none",
                    "sender": "gpu-reclaimer@example.com",
                },
            },
        )
        w = workloads.spawn()
        assert actuator.post(payload(alert_for(w))).status_code == 200
        wait_until(lambda: inbox.about(w.pid, "will be reclaimed"), 30)
        (warning,) = inbox.about(w.pid, "will be reclaimed")
        assert "You are on the node: its check at" in warning
        assert re.search(rf"saw a login on {terminal}, idle \d+ s\.", warning), warning
        assert "The reclaim waits while you are, up to 1 h past" in warning

        # Past the grace, held while its owner is there: deferred, never signalled.
        case = actuator.wait_state(w, "deferred", "sigterm_sent", "reclaimed", timeout=20)
        assert case["state"] == "deferred" and case["reason_code"] == "owner_present", case
        assert f"logged in on {terminal}" in case["reason"]
        assert w.alive()

        utmp.write_bytes(b"")  # logged out: presence read again within its 10 s reuse
        case = actuator.wait_state(w, "reclaimed", "failed", timeout=40)
        assert case["state"] == "reclaimed", case
    finally:
        controller.stop()
