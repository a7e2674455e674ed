"""The stack launcher's guard rails: missing tools, busy ports, a part that fails to start,
and the compressed Alertmanager timings it runs with. (Fast: no detection cycle.)"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from actuator.demo.ruleset import render_deploy
from actuator.demo.stack import Ports, Stack, StackError, StackOptions, reserve_ports
from tests.support import REPO, gpu_reclaimer_command

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_missing_prometheus_names_the_install_command(tmp_path: Path) -> None:
    # Only the interpreter's own directory on PATH: no prometheus, no alertmanager.
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    result = subprocess.run(
        [*gpu_reclaimer_command(), "demo", "--check", "--workdir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result
    assert "prometheus and prometheus-alertmanager not found" in result.stderr
    assert "sudo apt-get install prometheus prometheus-alertmanager" in result.stderr
    assert "make demo-setup" in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing was started or created


def test_a_requested_port_in_use_is_refused_clearly() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(StackError, match=rf"port {port} requested for prometheus is in use"):
            reserve_ports({"exporter": None, "prometheus": port})
    ports = reserve_ports({"a": None, "b": None, "c": None})
    assert len(set(ports.values())) == 3


def test_a_part_failing_to_start_stops_everything_started(
    system_tools: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A `prometheus` that dies at once; the real Alertmanager.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "prometheus"
    fake.write_text("#!/bin/sh\necho 'prometheus: simulated start-up failure' >&2\nexit 1\n")
    fake.chmod(0o755)
    alertmanager = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    assert alertmanager
    (bin_dir / "prometheus-alertmanager").symlink_to(alertmanager)
    monkeypatch.setenv("PATH", str(bin_dir))
    stack = Stack(StackOptions(workdir=tmp_path / "runs", label="fail", ports=Ports()))
    with pytest.raises(StackError, match="prometheus exited during start-up") as error:
        stack.start()
    assert "simulated start-up failure" in str(error.value)
    for name in ("exporter", "actuator", "alertmanager"):
        managed = stack.services[name]
        assert managed.process is not None and managed.process.poll() is not None, name
    assert (stack.logs_dir / "prometheus.log").is_file()


def test_alertmanager_timings_are_compressed_with_the_rules(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t\n")
    render_deploy(REPO, tmp_path, scale=1 / 15, token_file=token)
    config = tmp_path / "deploy" / "alertmanager.yml"
    am = yaml.safe_load(config.read_text())
    route = am["route"]
    assert (route["group_wait"], route["group_interval"], route["repeat_interval"]) == (
        "1s",
        "2s",
        "16m",
    )
    reclaim = next(r for r in route["routes"] if r["receiver"] == "gpu-reclaimer-actuator")
    assert reclaim["repeat_interval"] == "1m"
    assert am["global"]["resolve_timeout"] == "20s"
    assert "# One group per process" in config.read_text()  # comments kept
    amtool = shutil.which("amtool")
    if amtool:
        subprocess.run([amtool, "check-config", str(config)], check=True, capture_output=True)
    # At scale 1 nothing changes.
    render_deploy(REPO, tmp_path / "full", token_file=token)
    route = yaml.safe_load((tmp_path / "full" / "deploy" / "alertmanager.yml").read_text())
    assert (route["route"]["group_wait"], route["route"]["group_interval"]) == ("10s", "30s")
