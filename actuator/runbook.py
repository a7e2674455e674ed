"""Runbook links: every alert's `runbook_url` is `BASE#anchor`, from one base.

The rule files (and their promtool tests) carry the links in full, so Alertmanager, Grafana
and chat can open them; `python -m actuator.runbook --base URL` (`make runbook-links
RUNBOOK_BASE=URL`) rewrites every one to a site's base (its wiki, or where it publishes
docs/runbook.md), keeping each alert's anchor, and the PrometheusRule is generated from the
rule files. The demo serves docs/runbook.md itself (`runbook_html`) and links its alerts there.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import markdown

# A placeholder until a site sets its own: absolute, so every link is already a link.
DEFAULT_BASE = "https://runbook.gpu-reclaimer.example/runbook"
_LINK = re.compile(r"^(?P<key>\s*runbook_url:\s*)(?P<url>\S*?)(?P<anchor>#[a-z0-9-]+)[ \t]*$", re.M)


def check_base(base: str) -> str:
    """An absolute http(s) URL without a fragment (the anchor is each alert's own)."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
        raise ValueError(f"{base!r}: give an absolute http(s) URL without '#'")
    return base.rstrip("/") if parts.path not in ("", "/") else base


def set_base(text: str, base: str) -> str:
    """Every `runbook_url:` line of a rule or test file, pointed at `base`, anchor kept."""
    return _LINK.sub(lambda m: f"{m['key']}{base}{m['anchor']}", text)


def links(text: str) -> list[str]:
    return [m["url"] + m["anchor"] for m in _LINK.finditer(text)]


def runbook_html(source: Path) -> str:
    """docs/runbook.md as one HTML page, each section's id its alert's anchor."""
    converter = markdown.Markdown(extensions=["toc", "fenced_code", "tables"])
    body = converter.convert(source.read_text())
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>GPU Reclaimer runbook</title></head>"
        f"<body>{body}</body></html>"
    )


def rule_files(root: Path) -> list[Path]:
    return sorted((root / "alert-rules").glob("*.rules.yml")) + sorted(
        (root / "alert-rules" / "tests").glob("*.yml")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m actuator.runbook",
        description="Point every alert's runbook_url at BASE#anchor, in the rule files and "
        "their tests; then regenerate the PrometheusRule "
        "(python deploy/kubernetes/generate_prometheusrule.py).",
    )
    parser.add_argument("--base", required=True, help="e.g. https://wiki.example.com/gpu/runbook")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout")
    args = parser.parse_args(argv)
    try:
        base = check_base(args.base)
    except ValueError as exc:
        parser.error(str(exc))
    changed = 0
    for path in rule_files(args.root):
        text = path.read_text()
        new = set_base(text, base)
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"runbook links now {base}#<alert>: {changed} file(s) changed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
