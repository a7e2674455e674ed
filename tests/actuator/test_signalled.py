"""SignalledTrees (actuator/signalled.py): one store read per node's pass, kept up to date
with the trees the pass commits, so no process gets one step twice."""

from __future__ import annotations

from actuator.models import Member
from actuator.signalled import SignalledTrees, Trees
from tests.helpers.cases import BOOT, TICKS, make_case


def reader(recorded: Trees) -> tuple[SignalledTrees, list[tuple[str, str]]]:
    reads: list[tuple[str, str]] = []

    def read(node: str, boot: str) -> Trees:
        reads.append((node, boot))
        return {key: set(ids) for key, ids in recorded.items()}

    return SignalledTrees(read), reads


def test_another_cases_process_is_named_with_that_case_and_the_store_is_read_once() -> None:
    trees, reads = reader({(10, TICKS): {7, 3}, (11, TICKS): {1}})
    case = make_case(id=1)
    assert trees.others(case, [(10, TICKS), (11, TICKS), (12, TICKS)]) == {(10, TICKS): 3}
    assert trees.others(case, [(10, TICKS)]) == {(10, TICKS): 3}
    assert reads == [("n", BOOT)]  # once per (node, boot) for the whole pass


def test_a_tree_committed_in_this_pass_holds_back_the_next_case() -> None:
    trees, _ = reader({})
    first = make_case(id=1, pid=20, members=[Member(pid=21, start_ticks=TICKS + 1)])
    trees.add(first)
    second = make_case(id=2, pid=30)
    asked = [(20, TICKS), (21, TICKS + 1), (21, TICKS)]
    # The same PID with other start ticks is another process: not held back.
    assert trees.others(second, asked) == {(20, TICKS): 1, (21, TICKS + 1): 1}
    assert trees.others(first, asked) == {}  # a case never holds itself back


def test_each_node_and_boot_is_its_own_table() -> None:
    trees, reads = reader({(10, TICKS): {5}})
    trees.others(make_case(id=1, node="a"), [(10, TICKS)])
    trees.others(make_case(id=1, node="b"), [(10, TICKS)])
    trees.others(make_case(id=1, node="a", boot_id="other-boot"), [(10, TICKS)])
    assert reads == [("a", BOOT), ("b", BOOT), ("a", "other-boot")]
