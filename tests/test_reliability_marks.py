"""Every reliability case whose row in docs/reliability.md names a test has a test marked
`@pytest.mark.reliability(N)`: the list and the suite cannot drift apart unseen."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def marked_cases() -> set[int]:
    found: set[int] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "reliability"
            ):
                found |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    return found


def cases_naming_a_test() -> set[int]:
    named = set()
    for line in (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8").splitlines():
        row = re.match(r"\| (\d+) [^|]*\|([^|]*)\|", line)
        if row and "test_" in row.group(2):
            named.add(int(row.group(1)))
    return named


def test_every_case_whose_row_names_a_test_has_a_marked_test() -> None:
    named = cases_naming_a_test()
    assert {3, 46, *range(51, 55), *range(57, 65)} <= named  # the rows it was written for
    assert sorted(named - marked_cases()) == []
