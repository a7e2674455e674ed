"""The typed notice (actuator/notifications/notice.py): facts from the live re-check, kept
on the case, and the alert's claims compared with them."""

from __future__ import annotations

from dataclasses import replace

from actuator.models import OwnerPresence
from actuator.notifications.notice import Notice, OwnerHint, ProvenFacts, disagreements
from tests.helpers.cases import T0, make_case, make_live
from tests.helpers.notices import notice as built


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


def test_the_notice_says_the_owner_is_present_exactly_when_the_decision_reads_it_so() -> None:
    """One reading of presence (OwnerPresence.present): the warning's "you are on the node"
    and the decision's owner_present hold back the same cases, a session without a
    terminal's name and a terminal idle at the boundary included."""
    readings = [
        OwnerPresence(),
        OwnerPresence(sessions=1, idle_seconds=60.0, terminal="pts/3"),
        OwnerPresence(sessions=1, idle_seconds=60.0, terminal=""),  # ssh without a tty
        OwnerPresence(sessions=1, idle_seconds=1800.0, terminal="pts/1"),  # at presence_idle
        OwnerPresence(sessions=1, idle_seconds=1801.0, terminal="pts/1"),
        OwnerPresence(sessions=2, idle_seconds=None, terminal="pts/2"),  # idle time unread
        OwnerPresence(notebook_connections=0),
        OwnerPresence(notebook_connections=None),
        OwnerPresence(notebook_connections=3),
        OwnerPresence(sessions=1, idle_seconds=9000.0, terminal="pts/4", notebook_connections=1),
    ]
    for seen in readings:
        facts = ProvenFacts.from_live(make_case(), make_live(presence=seen))
        decided = seen.present(1800.0) is not None
        notice = replace(built(presence_grace=3600.0, presence_idle=1800.0), facts=facts)
        assert notice.presence_seen is decided, seen
        assert facts.presence().present(1800.0) == seen.present(1800.0), seen
        # Where no rule lets presence hold the reclaim, the notice promises nothing.
        assert not replace(notice, presence_grace=0.0).presence_seen
