"""Every relative link in the README and docs/ leads somewhere: the file exists, and a
`#anchor` into a Markdown file names one of its headings (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchors(markdown: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for line in FENCE.sub("", markdown.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            found.add(text.replace(" ", "-"))
    return found


def links(markdown: Path) -> list[str]:
    text = FENCE.sub("", markdown.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return LINK.findall(text)


def test_every_relative_link_resolves() -> None:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert len(files) > 10
    broken = []
    for markdown in files:
        for target in links(markdown):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not followed here
            path, _, anchor = target.partition("#")
            dest = (markdown.parent / path).resolve() if path else markdown
            where = f"{markdown.relative_to(ROOT)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where} (no heading #{anchor})")
    assert broken == []
