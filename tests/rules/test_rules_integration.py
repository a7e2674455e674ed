"""The shipped rules in a real Prometheus, scraping the real exporter on a simulated node.

Windows are compressed with actuator/demo/ruleset.py (scale 1/15: 15 s scrapes -> 1 s, the 1m
window -> 4 s, `for: 5m` -> 20 s), so an idle process is flagged about 30 s after it goes quiet.
Workloads are real `gpu-reclaimer sim run` processes, started together:

  idle      busy 2 s, then util 0, nothing written          -> GpuProcessIdle
  hang      busy 2 s with heartbeats, then util 100 %, none -> GpuProcessStalled
  busy      util ~95 %, log lines and heartbeats            -> nothing
  loading   memory grows for 90 s, util 0, stale log        -> nothing
  cpu       util 0, burns a CPU core (dataloader-bound)     -> nothing
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from actuator.demo.ruleset import render_deploy
from tests.helpers.prom import (
    background,
    firing_alerts,
    query,
    require_binary,
    start_prometheus,
)
from tests.support import REPO, free_port, gpu_reclaimer_command, wait_http, wait_until

SCALE = 1 / 15

pytestmark = pytest.mark.timeout(180)


def test_idle_and_hung_workloads_fire_and_the_others_stay_silent(tmp_path: Path) -> None:
    require_binary("prometheus")
    cli = gpu_reclaimer_command()
    node, heartbeats = tmp_path / "node", tmp_path / "heartbeats"
    heartbeats.mkdir()
    subprocess.run(
        [*cli, "sim", "init", str(node), "--gpus", "2", "--memory", "80GiB"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    port = free_port()
    exporter_cmd = [
        *cli,
        "exporter",
        "--listen",
        f"127.0.0.1:{port}",
        "--sim-dir",
        str(node),
        "--heartbeat-dir",
        str(heartbeats),
        "--node-name",
        "simnode",
    ]

    def workload(phases: str, *options: str, gpu: int = 0) -> list[str]:
        return [
            *cli,
            "sim",
            "run",
            "--dir",
            str(node),
            "--gpu",
            str(gpu),
            "--memory",
            "4GiB",
            "--phases",
            phases,
            *options,
        ]

    hb = ("--heartbeat", "--heartbeat-dir", str(heartbeats))
    # stdout goes to a file for all but `cpu`: that regular file behind fd 1 is the log the
    # exporter watches. (`cpu` writes nothing and has no log: Stalled cannot apply to it.)
    commands = {
        "idle": workload("busy=2s,idle"),
        "hang": workload("busy=2s,hang", *hb, gpu=1),
        "busy": workload("busy", *hb),
        "loading": workload("load=90s,idle", gpu=1),
        "cpu": workload("idle", "--cpu"),
    }

    prom_config = render_deploy(
        REPO,
        tmp_path / "run",
        scale=SCALE,
        exporters=[f"127.0.0.1:{port}"],
        actuator=f"127.0.0.1:{free_port()}",  # nothing listens: no actuator in this test
        alertmanagers=[],
    )

    with contextlib.ExitStack() as stack:
        stack.enter_context(background(exporter_cmd, tmp_path / "exporter.log"))
        wait_http(f"http://127.0.0.1:{port}/metrics")
        pids: dict[str, str] = {}
        for name, command in commands.items():
            log = Path(os.devnull) if name == "cpu" else tmp_path / f"{name}.log"
            process = stack.enter_context(background(command, log))
            pids[name] = str(process.pid)
        prom = stack.enter_context(start_prometheus(prom_config, tmp_path / "prom"))

        def firing_pids(alertname: str) -> set[str]:
            return {a["labels"].get("pid", "") for a in firing_alerts(prom.url, alertname)}

        try:
            wait_until(lambda: pids["idle"] in firing_pids("GpuProcessIdle"), timeout=75)
            wait_until(lambda: pids["hang"] in firing_pids("GpuProcessStalled"), timeout=30)
        except AssertionError as error:
            raise AssertionError(
                f"{error}\nalerts: {query(prom.url, 'ALERTS')}\nprometheus log:\n"
                f"{prom.log_tail()}\nexporter log:\n"
                f"{(tmp_path / 'exporter.log').read_text()[-3000:]}"
            ) from error

        # Labels the actuator and chat rely on made it onto the alert.
        (idle_alert,) = [
            a
            for a in firing_alerts(prom.url, "GpuProcessIdle")
            if a["labels"]["pid"] == pids["idle"]
        ]
        labels = idle_alert["labels"]
        assert labels["node"] == "simnode"
        assert labels["reclaim"] == "true"
        assert labels["gpu"] == "0"
        assert labels["uuid"].startswith("GPU-")
        assert labels["user"] and labels["command"]
        assert "project" in idle_alert["annotations"]["description"]

        # One class per process: the idle one is not also stalled, the hung one not idle.
        assert pids["idle"] not in firing_pids("GpuProcessStalled")
        assert pids["hang"] not in firing_pids("GpuProcessIdle")

        # The others never even went pending at any evaluation since Prometheus started.
        quiet = "|".join(pids[name] for name in ("busy", "loading", "cpu"))
        ever = query(prom.url, f'count_over_time(ALERTS{{pid=~"{quiet}"}}[10m])')
        assert ever == [], ever
        # ... while the exporter did see them all, so the silence is a verdict, not blindness.
        seen = query(prom.url, f'gpu_process_memory_used_bytes{{pid=~"{quiet}"}}')
        assert len(seen) == 3, seen
        cpu = query(prom.url, f'gpu_process:cpu_usage_cores:rate_window{{pid="{pids["cpu"]}"}}')
        assert cpu and float(cpu[0]["value"][1]) > 0.1, cpu
