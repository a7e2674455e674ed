"""The import graph has no upward arrow: the exporter never imports the actuator, and a
command loads only what it runs."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

_PROBE = """
import json, sys
from exporter.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules_loaded_by(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_exporter_module_imports_the_actuator() -> None:
    upward = {
        f"{path.relative_to(REPO)}: {name}"
        for path in (REPO / "exporter").rglob("*.py")
        for name in _imports(path)
        if name == "actuator" or name.startswith("actuator.")
    }
    assert not upward


def test_no_runtime_module_imports_the_demo() -> None:
    """The demo's stack serves the tools that run the whole loop on this machine (the demo
    and `chaos`); nothing the service runs imports it."""
    demo_users = {
        f"{path.relative_to(REPO)}: {name}"
        for path in (REPO / "actuator").rglob("*.py")
        if "demo" not in path.parts and "chaos" not in path.parts
        for name in _imports(path)
        if name.startswith("actuator.demo")
    }
    assert not demo_users
    chaos_users = {
        f"{path.relative_to(REPO)}: {name}"
        for path in (REPO / "actuator").rglob("*.py")
        if "chaos" not in path.parts
        for name in _imports(path)
        if name.startswith("actuator.chaos")
    }
    assert not chaos_users


@pytest.mark.parametrize(
    "argv",
    [("exporter", "--help"), ("sim", "--help"), ("--log-level", "ERROR", "exporter", "--help")],
)
def test_exporter_commands_load_neither_the_actuator_nor_the_demo(argv: tuple[str, ...]) -> None:
    loaded = _modules_loaded_by(*argv)
    assert "exporter.cli" in loaded  # the probe really ran the command
    assert not {m for m in loaded if m == "actuator" or m.startswith("actuator.")}
    assert "requests" not in loaded and "flask" not in loaded


def test_the_actuator_command_does_not_load_the_demo() -> None:
    loaded = _modules_loaded_by("actuator", "--help")
    assert "actuator.cli" in loaded
    assert not {m for m in loaded if m.startswith("actuator.demo")}


def test_demo_help_does_not_start_loading_the_stack() -> None:
    loaded = _modules_loaded_by("demo", "--help")
    assert "actuator.demo.cli" in loaded
    assert "actuator.demo.stack" not in loaded and "requests" not in loaded


def test_top_level_help_lists_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0
    for command in ("exporter", "sim", "actuator", "demo"):
        assert command in done.stdout


# What the node agent's serving path imports: the Node interface and its readers, never the
# central service (reconciler, HTTP API, store, server) or its libraries.
CENTRAL = (
    "actuator.reconciler",
    "actuator.app",
    "actuator.api",
    "actuator.store",
    "actuator.server",
    "actuator.notifications.notify",
    "actuator.notifications.channels",
    "actuator.schedulers",
    "flask",
    "psycopg",
    "jwt",
    "kubernetes",
    "ldap3",
    "sqlalchemy",
)


def test_the_node_agent_stands_apart_from_the_central_service() -> None:
    probe = (
        "import json, sys, tempfile\n"
        "from actuator.fleet.agent_server import AgentApplication\n"
        "from actuator.fleet.agent_app import create_agent_app\n"
        "from actuator.fleet.journal import SignalJournal\n"
        "from actuator.node import local_node\n"
        "from actuator.config import NodeConfig\n"
        "from actuator.policy import Protect\n"
        "node = local_node(NodeConfig(name='n', sim_dir=tempfile.mkdtemp()), Protect(), 4.0)\n"
        "create_agent_app(node, SignalJournal(tempfile.mkdtemp() + '/j.db'))\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "actuator.fleet.agent_app" in loaded
    central = {m for m in loaded for c in CENTRAL if m == c or m.startswith(c + ".")}
    assert not central, central


def _module_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in the file, TYPE_CHECKING and
    function-level imports included)."""
    paths = {}
    for path in [*REPO.glob("actuator/**/*.py"), *REPO.glob("exporter/**/*.py")]:
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        paths[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps |= {
                    m
                    for m in (node.module, *(f"{node.module}.{a.name}" for a in node.names))
                    if m in paths
                }
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in paths}
        graph[name] = deps - {name}
    return graph


def test_no_import_cycles() -> None:
    """The transports (HTTP API, keep page, keep socket) call operations; nothing calls back
    up. The one allowed loop: a package's __init__ and its own submodules."""
    graph = _module_graph()

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            here = todo.pop()
            if here == goal:
                return True
            if here not in seen:
                seen.add(here)
                todo.extend(graph.get(here, ()))
        return False

    cycles = sorted(
        f"{a} <-> {b}"
        for a, deps in graph.items()
        for b in deps
        if reaches(b, a) and not (b.startswith(a + ".") or a.startswith(b + "."))
    )
    assert not cycles


def test_test_modules_share_helpers_not_each_other() -> None:
    """Shared fixtures and factories live in tests/helpers/ (or a conftest.py), never in
    another test module."""
    crossing = {
        f"{path.relative_to(REPO)}: {name}"
        for path in (REPO / "tests").rglob("test_*.py")
        for name in _imports(path)
        if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")
    }
    assert not crossing


def test_the_node_does_not_reach_back_to_start_up() -> None:
    """Start-up (files, storage, the project mapping) runs in the composition roots (the
    service, the agent), which hand the node what it loaded; the node never imports it."""
    graph = _module_graph()
    assert "actuator.startup" not in graph["actuator.node"]
    assert "actuator.startup" not in graph["actuator.live"]


def _served() -> set[str]:
    """The project modules the service loads: everything the composition root and the
    HTTP app reach."""
    graph = _module_graph()
    seen: set[str] = set()
    todo = ["actuator.server", "actuator.app", "actuator.compose"]
    while todo:
        here = todo.pop()
        if here not in seen:
            seen.add(here)
            todo.extend(graph.get(here, ()))
    return seen


def test_the_service_loads_none_of_the_offline_tools() -> None:
    """report, backtest, tune and the command-line clients run apart from the service."""
    served = _served()
    assert "actuator.reconciler" in served and "actuator.notifications.notify" in served
    assert not {m for m in served if m.startswith(("actuator.tools", "actuator.demo"))}


def test_the_service_floor_stays_sorted() -> None:
    """No module the service runs grows past 700 lines, the reconciler stays the loop and
    one step's composition (500), and create_app stays assembly (80)."""
    graph = _module_graph()
    sizes = {
        m: len((REPO / (m.replace(".", "/") + ".py")).read_text(encoding="utf-8").splitlines())
        for m in _served()
        if m in graph and (REPO / (m.replace(".", "/") + ".py")).is_file()
    }
    assert {m: n for m, n in sizes.items() if n > 700} == {}
    assert sizes["actuator.reconciler"] <= 500
    app = ast.parse((REPO / "actuator" / "app.py").read_text(encoding="utf-8"))
    (create_app,) = [
        n for n in ast.walk(app) if isinstance(n, ast.FunctionDef) and n.name == "create_app"
    ]
    assert create_app.end_lineno is not None
    assert create_app.end_lineno - create_app.lineno + 1 <= 80
