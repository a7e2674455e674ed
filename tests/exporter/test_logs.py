"""One log format per process (exporter/logs.py): --log-level and --log-format anywhere and
in any case, their environment defaults, JSON lines, and gunicorn's lines in the same format."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.logs import LogOptionError, split_log_options
from tests.support import REPO, free_port, wait_http


def test_options_are_read_anywhere_and_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPU_RECLAIMER_LOG_LEVEL", raising=False)
    monkeypatch.delenv("GPU_RECLAIMER_LOG_FORMAT", raising=False)
    assert split_log_options(["exporter", "--log-level", "debug", "--listen", ":1"]) == (
        ["exporter", "--listen", ":1"],
        "DEBUG",
        "text",
    )
    assert split_log_options(["--log-format=JSON", "sim", "status", "x"])[1:] == ("INFO", "json")
    assert split_log_options(["sim", "run", "--", "--log-level", "x"])[0] == [
        "sim",
        "run",
        "--",
        "--log-level",
        "x",
    ]
    monkeypatch.setenv("GPU_RECLAIMER_LOG_LEVEL", "warning")
    assert split_log_options(["exporter"])[1] == "WARNING"
    for bad in (["--log-level", "verbose"], ["--log-format", "xml"], ["--log-level"]):
        with pytest.raises(LogOptionError):
            split_log_options(bad)


def test_a_bad_level_is_one_line_and_exit_2() -> None:
    command = [sys.executable, "-m", "exporter.cli", "exporter", "--log-level", "loud"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=30)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "gpu-reclaimer: error: --log-level: 'loud' is not one of DEBUG, INFO, WARNING, ERROR"
    ]


def test_the_actuator_logs_one_json_format_gunicorns_lines_included(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a-token-of-enough-bytes\n")
    token.chmod(0o600)
    config = tmp_path / "actuator.yml"
    port = free_port()
    config.write_text(
        f"server: {{listen: '127.0.0.1:{port}', workers: 1}}\n"
        f"storage: {{database: {tmp_path}/db, audit_log: {tmp_path}/audit}}\n"
        f"node: {{sim_dir: {tmp_path}/node}}\n"
    )
    subprocess.run(
        [sys.executable, "-m", "exporter.cli", "sim", "init", str(tmp_path / "node")],
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    log = tmp_path / "actuator.log"
    with log.open("wb") as out:
        actuator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter.cli",
                "actuator",
                "--config",
                str(config),
                "--token-file",
                str(token),
                "--log-format",
                "json",
                "--log-level",
                "info",
            ],
            stdout=out,
            stderr=out,
            cwd=REPO,
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/-/healthy", timeout=60)
        time.sleep(0.5)
    finally:
        actuator.terminate()
        actuator.wait(timeout=30)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    loggers = {r["logger"] for r in records}
    assert any(name.startswith("gunicorn") for name in loggers), loggers
    assert any(name.startswith("actuator") for name in loggers), loggers
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert "INFO" in {r["level"] for r in records}
