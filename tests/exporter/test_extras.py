"""The core install runs the exporter and the simulation; a command that needs an extra
says which one, never a traceback (the extras' libraries made unimportable, as in a bare
install: tests/helpers/bare.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import requests

from exporter.extras import missing_extra
from tests.support import REPO, free_port, wait_http

BARE = [sys.executable, "-m", "tests.helpers.bare"]


def test_a_missing_library_names_its_extra() -> None:
    said = missing_extra(ModuleNotFoundError("No module named 'psycopg'", name="psycopg"))
    assert said is not None and "pip install 'gpu-reclaimer[postgres]'" in said
    assert missing_extra(ModuleNotFoundError("x", name="flask.json")) is not None
    assert missing_extra(ModuleNotFoundError("x", name="no_such_thing")) is None


def test_the_exporter_serves_with_the_core_dependencies_only(sim_node: Path) -> None:
    port = free_port()
    exporter = subprocess.Popen(
        [*BARE, "exporter", "--sim-dir", str(sim_node), "--listen", f"127.0.0.1:{port}"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", timeout=30)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert "gpu_info{" in text and "gpu_exporter_scrape_duration_seconds" in text, text[:500]
    finally:
        exporter.terminate()
        _, errors = exporter.communicate(timeout=20)
    assert "Traceback" not in errors, errors


def test_a_command_that_needs_an_extra_says_which(tmp_path: Path) -> None:
    config = tmp_path / "actuator.yml"
    config.write_text(f"storage: {{database: {tmp_path}/db, audit_log: {tmp_path}/audit}}\n")
    token = tmp_path / "token"
    token.write_text("a-token-of-enough-bytes\n")
    token.chmod(0o600)
    done = subprocess.run(
        [*BARE, "actuator", "--config", str(config), "--token-file", str(token)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "extra" in done.stderr and "pip install 'gpu-reclaimer[" in done.stderr, done.stderr
