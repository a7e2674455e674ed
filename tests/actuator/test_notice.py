"""The typed notice (actuator/notifications/notice.py): facts from the live re-check, kept
on the case, and the alert's claims compared with them."""

from __future__ import annotations

from actuator.notifications.notice import Notice, OwnerHint, ProvenFacts, disagreements
from tests.helpers.cases import T0, make_case, make_live


def test_proven_facts_come_from_the_live_re_check_and_survive_the_case_record() -> None:
    case = make_case(labels={"command": "forged", "gpu": "7", "project": "other"})
    live = make_live(
        program="train.py",
        cmdline="python train.py --lr 0.1",
        gpu_index=2,
        gpu_model="H100",
        project="vision",
    )
    facts = ProvenFacts.from_live(case, live)
    assert (facts.program, facts.gpu, facts.project, facts.user) == (
        "train.py",
        "2",
        "vision",
        "alice",
    )
    case.facts = facts.to_json()
    assert ProvenFacts.of_case(case) == facts
    assert ProvenFacts.of_case(make_case()) is None  # the node proved nothing yet


def test_a_claim_the_node_contradicts_is_a_disagreement_and_an_unknown_is_not() -> None:
    facts = ProvenFacts(
        node="n",
        pid=1,
        gpu_uuid="GPU-0",
        gpu_index=0,
        user="alice",
        project="vision",
        program="train.py",
    )
    labels = {"gpu": "7", "user": "alice", "project": "other", "command": "train.py", "pod": "p"}
    assert disagreements(labels, facts) == {
        "gpu": {"alert": "7", "node": "0"},
        "project": {"alert": "other", "node": "vision"},
        "pod": {"alert": "p", "node": ""},
    }
    unknown_gpu = ProvenFacts(node="n", pid=1, gpu_uuid="GPU-0")
    assert "gpu" not in disagreements({"gpu": "7"}, unknown_gpu)  # nothing to compare
    assert unknown_gpu.gpu == "GPU-0"  # shown by UUID when the index is unknown


def test_the_owner_the_scheduler_proves_is_whose_notice_it_is() -> None:
    facts = ProvenFacts(node="n", pid=1, gpu_uuid="GPU-0", user="root")
    notice = Notice(
        kind="warning",
        case=3,
        facts=facts,
        alertname="GpuProcessIdle",
        since=T0,
        deadline=T0 + 60,
        term_timeout=10,
        grace=60,
        owner=OwnerHint(user="bob"),
    )
    assert notice.user == "bob"
    body = notice.to_json()
    assert body["user"] == "bob" and body["sigterm_at"] == T0 + 60 and body["case"] == 3
