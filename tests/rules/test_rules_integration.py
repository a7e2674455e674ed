"""The shipped rules in a real Prometheus, scraping the real exporter on a simulated node.

Windows are compressed with actuator/demo/ruleset.py (scale 1/15: 15 s scrapes -> 1 s, the 1m
window -> 4 s, `for: 5m` -> 20 s), so an idle process is flagged about 30 s after it goes quiet.
Workloads are real `gpu-reclaimer sim run` processes, started together:

  idle      busy 2 s, then util 0, nothing written          -> GpuProcessIdle
  hang      busy 2 s with heartbeats, then util 100 %, none -> GpuProcessStalled
  busy      util ~95 %, log lines and heartbeats            -> nothing
  loading   memory grows for 90 s, util 0, stale log        -> nothing
  cpu       util 0, burns a CPU core (dataloader-bound)     -> nothing

Prometheus also remote-writes everything (raw and recorded series) to VictoriaMetrics, the
long-term store of the scale-out path (docs/deployment.md "Sizing"): `report`, `backtest`
and the fleet's node discovery are run against it and against Prometheus alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from actuator.demo.ruleset import render_deploy
from tests.helpers.prom import (
    Server,
    background,
    firing_alerts,
    query,
    require_binary,
    start_prometheus,
    start_victoriametrics,
)
from tests.support import REPO, free_port, gpu_reclaimer_command, wait_http, wait_until

SCALE = 1 / 15

pytestmark = pytest.mark.timeout(180)
NODE = "simnode"


@dataclass
class Running:
    prom: Server
    vm: Server  # VictoriaMetrics, fed by Prometheus's remote_write
    pids: dict[str, str]
    rules: Path  # the rules as this Prometheus runs them (scaled)
    tmp: Path


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    require_binary("prometheus")
    require_binary("victoria-metrics")
    tmp_path = tmp_path_factory.mktemp("rules")
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
        NODE,
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

    vm_port = free_port()
    config = yaml.safe_load(prom_config.read_text())
    # Everything, recorded series included, as a long-term store would get it; sent at once.
    config["remote_write"] = [
        {
            "url": f"http://127.0.0.1:{vm_port}/api/v1/write",
            "queue_config": {"batch_send_deadline": "1s"},
        }
    ]
    prom_config.write_text(yaml.safe_dump(config, sort_keys=False))

    with contextlib.ExitStack() as stack:
        stack.enter_context(background(exporter_cmd, tmp_path / "exporter.log"))
        wait_http(f"http://127.0.0.1:{port}/metrics")
        pids: dict[str, str] = {}
        for name, command in commands.items():
            log = Path(os.devnull) if name == "cpu" else tmp_path / f"{name}.log"
            process = stack.enter_context(background(command, log))
            pids[name] = str(process.pid)
        vm = stack.enter_context(start_victoriametrics(tmp_path / "vm", vm_port))
        prom = stack.enter_context(start_prometheus(prom_config, tmp_path / "prom"))
        rules = prom_config.parent.parent / "alert-rules" / "gpu-reclaimer.rules.yml"
        yield Running(prom, vm, pids, rules, tmp_path)


def test_idle_and_hung_workloads_fire_and_the_others_stay_silent(running: Running) -> None:
    prom, pids, tmp_path = running.prom, running.pids, running.tmp

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
        a for a in firing_alerts(prom.url, "GpuProcessIdle") if a["labels"]["pid"] == pids["idle"]
    ]
    labels = idle_alert["labels"]
    assert labels["node"] == NODE
    assert labels["reclaim"] == "true"
    assert labels["gpu"] == "0"
    assert labels["uuid"].startswith("GPU-")
    assert labels["user"] and labels["command"]
    assert labels["footprint"] in {"small", "large"}
    assert not idle_alert["annotations"]  # machine to machine: labels only

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


def test_a_long_term_store_fed_by_prometheus_answers_report_backtest_and_discovery(
    running: Running,
) -> None:
    """The scale-out path: Prometheus remote-writes raw and recorded series to
    VictoriaMetrics, and the commands that read history (`report`, `backtest`) and the
    fleet's node discovery give there what they give on Prometheus."""
    from actuator.fleet.directory import PrometheusAgents

    prom, vm, pids = running.prom, running.vm, running.pids
    idle = f'gpu_process:idle_condition{{pid="{pids["idle"]}"}}'
    # The idle process's recorded condition has reached the store (the alert fired first).
    wait_until(lambda: pids["idle"] in _firing(prom), timeout=75)
    wait_until(lambda: query(vm.url, idle), timeout=30)
    assert query(vm.url, f'gpu_process_info{{pid="{pids["busy"]}"}}')  # raw series too

    # Node discovery: the agent beside each exporter, the same from either.
    found = {
        name: PrometheusAgents(server.url, "gpu-exporter", refresh=0).urls()
        for name, server in (("prometheus", prom), ("victoriametrics", vm))
    }
    assert found["victoriametrics"] == found["prometheus"] == {NODE: "https://127.0.0.1:9837"}

    # `report` over the last minutes: the same idle process and owner from either.
    reports = {
        name: _json_command("report", server.url, "--since", "3m")
        for name, server in (("prometheus", prom), ("victoriametrics", vm))
    }
    for name, report in reports.items():
        assert report["idle_process_hours"] > 0, (name, report)
        assert report["gpus"] == 2, (name, report)
    users = {
        name: {row["name"] for row in r["groups"] if row["by"] == "user"}
        for name, r in reports.items()
    }
    assert users["victoriametrics"] == users["prometheus"] != set()

    # `backtest` of the rules as this Prometheus runs them: the idle process flagged, the
    # busy one not, from either (once the history holds the hold time at the step: asked
    # again until then, on Prometheus first, then on the store fed by it).
    def flagged(server: Server) -> set[str]:
        found = _json_command(
            "backtest",
            server.url,
            "--since",
            "3m",
            "--rules",
            str(running.rules),
            "--baseline",
            str(running.rules),
            "--step",
            "1s",
            "--alert",
            "GpuProcessIdle",
        )
        return {str(row["pid"]) for row in found["processes"] if row["candidate_minutes"]}

    for server in (prom, vm):
        wait_until(lambda server=server: pids["idle"] in flagged(server), timeout=60, interval=2)
        assert pids["busy"] not in flagged(server)


def _firing(prom: Server) -> set[str]:
    return {a["labels"].get("pid", "") for a in firing_alerts(prom.url, "GpuProcessIdle")}


def _json_command(command: str, url: str, *args: str) -> dict:  # type: ignore[type-arg]
    done = subprocess.run(
        [*gpu_reclaimer_command(), command, "--prometheus", url, *args, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout))
