"""Runbook links from one base: a base must be an absolute http(s) URL without a fragment;
moving the base keeps each alert's anchor; the served runbook has an anchor per alert."""

from __future__ import annotations

from pathlib import Path

import pytest

from actuator.runbook import check_base, links, runbook_html, set_base

REPO = Path(__file__).resolve().parents[2]
RULE = (
    "  - alert: GpuProcessIdle\n"
    "    annotations:\n"
    "      runbook_url: https://old.example/runbook#gpuprocessidle\n"
    "  - alert: GpuNvmlDown\n"
    "    annotations:\n"
    "      runbook_url: https://old.example/runbook#gpunvmldown  \n"
)


@pytest.mark.parametrize(
    "base", ["wiki/runbook", "ftp://wiki.example/runbook", "https://wiki.example/r#x", "https://"]
)
def test_a_base_must_be_an_absolute_web_link_without_an_anchor(base: str) -> None:
    with pytest.raises(ValueError, match="absolute http"):
        check_base(base)


def test_a_trailing_slash_is_dropped_from_a_path_but_not_from_a_bare_host() -> None:
    assert check_base("https://wiki.example/gpu/runbook/") == "https://wiki.example/gpu/runbook"
    assert check_base("https://wiki.example/") == "https://wiki.example/"


def test_moving_the_base_keeps_every_anchor() -> None:
    moved = set_base(RULE, "https://wiki.example/gpu")
    assert links(moved) == [
        "https://wiki.example/gpu#gpuprocessidle",
        "https://wiki.example/gpu#gpunvmldown",
    ]
    assert "alert: GpuProcessIdle" in moved and "old.example" not in moved


def test_the_served_runbook_has_an_anchor_for_every_linked_alert() -> None:
    page = runbook_html(REPO / "docs" / "runbook.md")
    rules = "".join(p.read_text() for p in (REPO / "alert-rules").glob("*.rules.yml"))
    anchors = {link.partition("#")[2] for link in links(rules)}
    assert anchors
    for anchor in anchors:
        assert f'id="{anchor}"' in page, anchor
