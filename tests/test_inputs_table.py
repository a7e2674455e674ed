"""docs/actuator.md's table of inputs names, for each input, the test that forges it: every
test it names exists (a renamed or deleted test fails here, not silently in the docs)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def table_rows() -> list[str]:
    text = (ROOT / "docs" / "actuator.md").read_text(encoding="utf-8")
    section = text.split("## Inputs: who controls each", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]


def test_every_input_names_a_test_that_exists() -> None:
    rows = table_rows()[1:]  # after the header
    assert len(rows) >= 20
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 4 and all(cells), row
        named = re.findall(r"`([\w/]+\.py)(?:::(\w+))?`|`::(\w+)`", cells[3])
        assert named, f"no test named for {cells[0]}"
        current = ""
        for path, test, more in named:
            if path:
                current = path
                assert (ROOT / "tests" / path).exists(), path
            name = test or more
            if name:
                source = (ROOT / "tests" / current).read_text(encoding="utf-8")
                assert re.search(rf"^def {name}\(", source, re.M), f"{current}::{name}"
