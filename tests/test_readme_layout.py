"""The README's Layout section lists exactly the modules and folders of the tree."""

from __future__ import annotations

import re
import subprocess

from tests.support import REPO


def _layout_paths() -> set[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    paths, parents = set(), []
    for line in block.splitlines():
        match = re.match(r"( *)(\S+)\s{2,}\S", line)
        if not match:
            continue
        depth, name = len(match.group(1)) // 2, match.group(2)
        parents[depth:] = [name]
        paths.add("".join(parents))
    return paths


def _tree_paths() -> set[str]:
    tracked = subprocess.run(
        ["git", "ls-files", "exporter", "actuator"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout.split()
    modules = {p for p in tracked if p.endswith(".py") and not p.endswith("__init__.py")}
    folders = {p.rsplit("/", 1)[0] + "/" for p in modules}
    return modules | folders


def test_layout_matches_the_packages() -> None:
    listed = {p for p in _layout_paths() if p.startswith(("exporter/", "actuator/"))}
    tree = _tree_paths()
    assert listed - tree == set(), "listed in the README but not in the tree"
    assert tree - listed == set(), "in the tree but missing from the README's Layout"


def test_layout_lists_the_top_level_folders() -> None:
    listed = {p for p in _layout_paths() if p.count("/") == 1 and p.endswith("/")}
    present = {
        p.name + "/"
        for p in REPO.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and p.name not in {"build", "var"}
        and not p.name.endswith(".egg-info")
    }
    assert present <= listed, present - listed
