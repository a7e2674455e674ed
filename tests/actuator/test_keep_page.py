"""The "keep my job" page: signed, expiring, single-case, single-use links; CSRF-safe posts;
every action audited with the link's identity."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from actuator.app import create_app
from actuator.keeplinks import KeepLinks, LinkError, link_key
from actuator.models import State
from actuator.notifications.notice import ProvenFacts
from actuator.runtime import Runtime
from actuator.store.cases import insert_case
from tests.helpers.api import TOKEN, make_runtime
from tests.helpers.cases import eff, make_case

PUBLIC = "https://reclaimer.example.com"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    import time

    return Clock(time.time())


@pytest.fixture
def rt(tmp_path: Path, clock: Clock) -> Runtime:
    runtime = make_runtime(tmp_path)
    runtime.links = KeepLinks(link_key(TOKEN), PUBLIC, ttl=3600, clock=clock)
    return runtime


@pytest.fixture
def client(rt: Runtime) -> Any:
    return create_app(rt).test_client()


def notified_case(rt: Runtime, **over: Any) -> int:
    # The alert claims another command and GPU; the page shows what the node proved.
    facts = ProvenFacts(
        node="n",
        pid=4242,
        gpu_uuid="GPU-2",
        gpu_index=2,
        user="lilei",
        program="t.py",
        cmdline="python t.py",
        memory_bytes=8 << 30,
    )
    case = make_case(
        id=0,
        **({"state": State.NOTIFIED} | {k: over.pop(k) for k in ["state"] if k in over}),
        user="lilei",
        labels={"command": "forged.py", "gpu": "7"},
        gpu_memory_bytes=8 << 30,
        notified_at=rt.clock(),
        notified_mono=rt.mono(),
        facts=facts.to_json(),
        # The rule recorded at its notice (every notified case has one).
        **({"effective": eff(grace=600.0).model_dump()} | over),
    )
    with rt.store._tx() as conn:
        insert_case(conn, case, {})
    return case.id


def path_of(url: str) -> str:
    assert url.startswith(PUBLIC + "/keep/")
    return url[len(PUBLIC) :]


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    assert found, page
    return found.group(1)


def audit(rt: Runtime) -> list[dict[str, Any]]:
    path = Path(rt.config.storage.audit_log)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.reliability(47)
def test_the_page_shows_the_case_in_the_owners_language_without_the_api_token(rt, client):
    case_id = notified_case(rt)
    path = path_of(rt.links.url(case_id))
    page = client.get(path, headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "保留 GPU 任务" in html and "python t.py (PID 4242)" in html and "8.0 GiB" in html
    assert "forged" not in html and "GPU 2" in html
    assert 'id="keep-4h"' in html and 'id="release"' in html and "发送 SIGTERM" in html
    assert "Keep for 4 h" in client.get(path + "?lang=en").get_data(as_text=True)
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert page.headers["Cache-Control"] == "no-store"
    assert client.get("/api/v1/cases").status_code == 401  # the API still wants the token


def test_keep_for_4h_snoozes_the_case_once_and_audits_the_link(rt, client):
    case_id = notified_case(rt)
    path = path_of(rt.links.url(case_id))
    csrf = csrf_of(client.get(path).get_data(as_text=True))
    done = client.post(path, data={"csrf": csrf, "action": "keep", "hours": "4"})
    assert done.status_code == 200, done.get_data(as_text=True)
    case = rt.store.get_case(case_id)
    assert case.state == State.SNOOZED
    assert case.snoozed_until == pytest.approx(rt.clock() + 4 * 3600, abs=5)
    records = [r for r in audit(rt) if r.get("case") == case_id]
    (used,) = [r for r in records if r["event"] == "keep_link"]
    assert used["action"] == "keep" and used["hours"] == 4 and used["owner"] == "lilei"
    (snooze,) = [r for r in records if r["event"] == "snooze"]
    assert snooze["by"].startswith("keep link ") and snooze["duration"] == 4 * 3600
    again = client.post(path, data={"csrf": csrf, "action": "keep", "hours": "24"})
    assert again.status_code == 409 and "already used" in again.get_data(as_text=True)
    assert rt.store.get_case(case_id).snoozed_until == case.snoozed_until  # unchanged


def test_release_now_lets_the_reconciler_skip_the_rest_of_the_grace(rt, client):
    case_id = notified_case(rt)
    path = path_of(rt.links.url(case_id))
    csrf = csrf_of(client.get(path).get_data(as_text=True))
    done = client.post(path, data={"csrf": csrf, "action": "release"})
    assert done.status_code == 200
    assert rt.store.get_case(case_id).release_requested_mono is not None
    # A later keep overrides it: a re-notified case must get its whole grace again.
    other = path_of(rt.links.url(case_id))
    page = client.get(other).get_data(as_text=True)
    kept = client.post(other, data={"csrf": csrf_of(page), "action": "keep", "hours": "1"})
    assert kept.status_code == 200
    assert rt.store.get_case(case_id).release_requested_mono is None


def test_tampered_expired_foreign_and_forged_posts_change_nothing(rt, client, clock):
    case_id = notified_case(rt)
    url = rt.links.url(case_id)
    path = path_of(url)
    csrf = csrf_of(client.get(path).get_data(as_text=True))
    token = path.rsplit("/", 1)[1]
    tampered = path[:-3] + ("aaa" if not path.endswith("aaa") else "bbb")
    assert client.get(tampered).status_code == 403
    other = KeepLinks(link_key("another-actuator-token-0123456789"), PUBLIC).token(case_id)
    assert client.get(f"/keep/{other}").status_code == 403  # not signed by us
    bad = [
        ({"csrf": "0" * 64, "action": "keep", "hours": "4"}, {}, 403),  # no page served it
        ({"csrf": csrf, "action": "keep", "hours": "4"}, {"Origin": "https://evil.example"}, 403),
        ({"csrf": csrf, "action": "keep", "hours": "999"}, {}, 422),  # beyond keep_max
        ({"csrf": csrf, "action": "delete"}, {}, 422),
    ]
    for form, headers, status in bad:
        assert client.post(path, data=form, headers=headers).status_code == status, form
    assert rt.store.get_case(case_id).state == State.NOTIFIED
    assert not [r for r in audit(rt) if r.get("event") in ("keep_link", "snooze")]
    clock.now += 3601  # the link's age is over its ttl
    expired = client.post(path, data={"csrf": csrf, "action": "keep", "hours": "1"})
    assert expired.status_code == 403 and "expired" in expired.get_data(as_text=True)
    with pytest.raises(LinkError):
        rt.links.verify(token)
    assert rt.store.get_case(case_id).state == State.NOTIFIED


def test_a_case_already_signalled_cannot_be_kept(rt, client):
    case_id = notified_case(rt, term_at=rt.clock())
    case = rt.store.get_case(case_id)
    rt.store.transition(case, State.TERMINATING, reason="grace over", evidence={}, now=rt.clock())
    path = path_of(rt.links.url(case_id))
    page = client.get(path + "?lang=en").get_data(as_text=True)
    assert "can no longer be kept" in page and 'id="keep-1h"' not in page
    csrf = rt.links.csrf(path.rsplit("/", 1)[1])  # what a page would have carried
    refused = client.post(path, data={"csrf": csrf, "action": "keep", "hours": "1"})
    assert refused.status_code == 409
    assert rt.store.get_case(case_id).state == State.TERMINATING


def test_the_page_offers_only_what_the_cases_rule_allows(rt, client):
    """The case's rule lets owners keep for 0s to 4h: no 24 h button, and a forged 24 h
    post is refused with the bounds and changes nothing."""
    rule = eff(keep_max=4 * 3600.0).model_dump()
    case_id = notified_case(rt, effective=rule)
    path = path_of(rt.links.url(case_id))
    page = client.get(path + "?lang=en").get_data(as_text=True)
    assert 'id="keep-1h"' in page and 'id="keep-4h"' in page and 'id="keep-24h"' not in page
    forged = client.post(path, data={"csrf": csrf_of(page), "action": "keep", "hours": "24"})
    assert forged.status_code == 422
    assert "lets owners keep a process for 0s to 4h, not 24h" in forged.get_data(as_text=True)
    assert rt.store.get_case(case_id).state == State.NOTIFIED


def test_after_repeated_reclaims_the_owners_keep_waits_for_an_sre(rt, client):
    """A repeat step with keep_needs_sre: the page offers no keep, and a forged one is
    refused saying why; an SRE keeps through the API's snooze."""
    rule = eff(repeat_prior=5, keep_needs_sre=True).model_dump()
    case_id = notified_case(rt, effective=rule)
    path = path_of(rt.links.url(case_id))
    page = client.get(path + "?lang=en").get_data(as_text=True)
    assert 'id="keep-1h"' not in page and 'id="release"' in page
    assert "after 5 reclaims of your jobs, keeping needs an SRE" in page  # said, not hidden
    forged = client.post(path, data={"csrf": csrf_of(page), "action": "keep", "hours": "1"})
    assert forged.status_code == 422
    assert "after 5 reclaims of your jobs, keeping needs an SRE" in forged.get_data(as_text=True)
    assert rt.store.get_case(case_id).state == State.NOTIFIED


def test_under_demand_before_any_demand_the_state_row_says_what_the_page_says(rt, client):
    """Told, idle, no grace running: not "in its grace period" beside "nothing happens yet"."""
    effective = {"effective": eff(grace=600.0, reclaim_when="demand").model_dump()}
    case_id = notified_case(rt, **effective)
    html = client.get(path_of(rt.links.url(case_id)) + "?lang=en").get_data(as_text=True)
    assert "Nothing happens yet" in html
    assert "kept until someone needs the GPU" in html and "grace period" not in html
    zh = client.get(path_of(rt.links.url(case_id)) + "?lang=zh-CN").get_data(as_text=True)
    assert "有人需要这块 GPU 时才会回收" in zh and "宽限期中" not in zh


def test_a_case_whose_rule_cannot_be_told_offers_no_keep_and_says_why(rt, client):
    """The page offers what the owner's door accepts: with no rule recorded on the case the
    door keeps nothing, so the page offers no button (it used to offer all three and spend
    the link on a refusal), says why, and a forged post does not spend the link."""
    case_id = notified_case(rt, effective=None)
    path = path_of(rt.links.url(case_id))
    page = client.get(path + "?lang=en").get_data(as_text=True)
    assert 'id="keep-1h"' not in page and 'id="release"' in page
    assert "cannot tell which rule applies" in page
    forged = client.post(path, data={"csrf": csrf_of(page), "action": "keep", "hours": "1"})
    assert forged.status_code == 422
    assert "cannot tell which rule applies" in forged.get_data(as_text=True)
    again = client.get(path + "?lang=en")
    assert again.status_code == 200  # the one-time link is still unspent
    assert rt.store.get_case(case_id).state == State.NOTIFIED


@pytest.mark.reliability(73)
def test_a_suspended_cases_page_says_where_its_owners_resume_stands(rt, client):
    """Issue 58: a resume asked waits first in line where no GPU has room, and a refused one
    is tried again; the page says which, when it is looked at again and how many tries are
    left, in the owner's language."""
    asked = notified_case(rt, state=State.SUSPENDED, resume_requested_mono=rt.mono())
    html = client.get(path_of(rt.links.url(asked)) + "?lang=en").get_data(as_text=True)
    assert 'id="restore"' in html and "or another of the same chip, at the next step" in html
    refused = notified_case(
        rt,
        pid=4243,
        state=State.SUSPENDED,
        resume_requested_mono=rt.mono() + 30,
        restore_attempts=2,
    )
    html = client.get(path_of(rt.links.url(refused)) + "?lang=en").get_data(as_text=True)
    assert "the driver refused the restore: tried again at" in html and "(try 3 of 5)" in html
    zh = client.get(path_of(rt.links.url(refused)) + "?lang=zh-CN").get_data(as_text=True)
    assert "驱动拒绝了恢复" in zh and "第 3 次，共 5 次" in zh
    waiting = notified_case(
        rt, pid=4245, state=State.SUSPENDED, resume_requested_mono=rt.mono() + 30, restore_waits=3
    )
    html = client.get(path_of(rt.links.url(waiting)) + "?lang=en").get_data(as_text=True)
    assert "first in line for room on its GPU or another of its chip: looked at again" in html
    assert "try" not in html.split("first in line")[1][:120]  # no try is counted while it waits
    quiet = notified_case(rt, pid=4244, state=State.SUSPENDED)  # nobody asked: no row
    assert 'id="restore"' not in client.get(path_of(rt.links.url(quiet))).get_data(as_text=True)
