"""The whole pipeline for a fleet: two simulated nodes, each with its exporter and agent on
its own loopback address (127.0.0.2, 127.0.0.3), one Prometheus scraping both exporters
with the shipped rules (rescaled), one Alertmanager with the reference routes, and one
central actuator that finds the agents through Prometheus. An idle process on node B is
reclaimed on node B; a busy one on node A is left alone."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import requests
import yaml

from actuator.config import merge_config
from actuator.demo.ruleset import render_deploy
from tests.actuator.settings import FAST_POLICY
from tests.helpers.actuator import TOKEN, Workloads
from tests.helpers.fleet import Agent, client_tls, make_certs, make_node
from tests.helpers.prom import background, start_alertmanager, start_prometheus
from tests.support import REPO, free_port, gpu_reclaimer_command, wait_http, wait_until

pytestmark = pytest.mark.timeout(180)
SCALE = 1 / 15  # 1 s scrapes, the 5 min hold is 20 s
HOSTS = {"node-a": "127.0.0.2", "node-b": "127.0.0.3"}


def test_prometheus_and_alertmanager_drive_the_central_actuator_to_node_b(
    tmp_path: Path,
) -> None:
    directory = make_certs(tmp_path / "certs", list(HOSTS), HOSTS)
    exporter_port, agent_port = free_port(), free_port()
    actuator_port, am_port = free_port(), free_port()
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    prom_config = render_deploy(
        REPO,
        tmp_path / "run",
        scale=SCALE,
        exporters=[f"{h}:{exporter_port}" for h in HOSTS.values()],
        actuator=f"127.0.0.1:{actuator_port}",
        alertmanagers=[f"127.0.0.1:{am_port}"],
        token_file=token,
    )
    with contextlib.ExitStack() as stack:
        workloads, agents = {}, []
        for name, host in HOSTS.items():
            sim = make_node(tmp_path / name)
            workloads[name] = Workloads(sim)
            stack.callback(workloads[name].cleanup)
            agent = Agent(name, sim, directory, tmp_path, port=agent_port, host=host).start()
            stack.callback(agent.kill)
            agents.append(agent)
            stack.enter_context(
                background(
                    [
                        *gpu_reclaimer_command(),
                        "exporter",
                        "--listen",
                        f"{host}:{exporter_port}",
                        "--sim-dir",
                        str(sim),
                        "--node-name",
                        name,
                        "--heartbeat-dir",
                        str(tmp_path / f"heartbeats-{name}"),
                    ],
                    tmp_path / f"exporter-{name}.log",
                )
            )
            wait_http(f"http://{host}:{exporter_port}/metrics")
        # A healthy job shows progress (here heartbeats): busy SMs alone, with nothing
        # written, is what the Stalled rule looks for.
        beats = str(tmp_path / "heartbeats-node-a")  # the agent's and the exporter's
        busy_on_a = workloads["node-a"].spawn(
            "--heartbeat", "--heartbeat-dir", beats, phases="busy", memory="2GiB"
        )
        idle_on_b = workloads["node-b"].spawn(memory="3GiB")
        am = stack.enter_context(
            start_alertmanager(
                tmp_path / "run" / "deploy" / "alertmanager.yml", tmp_path / "am", port=am_port
            )
        )
        prom = stack.enter_context(start_prometheus(prom_config, tmp_path / "prom"))
        config = merge_config(
            FAST_POLICY,
            {
                "node": {"name": "central"},
                "server": {"listen": f"127.0.0.1:{actuator_port}", "token_file": str(token)},
                "storage": {
                    "database": str(tmp_path / "actuator.db"),
                    "audit_log": str(tmp_path / "audit.jsonl"),
                },
                "agents": {
                    "tls": client_tls(directory),
                    "prometheus": {
                        "url": prom.url,
                        "job": "gpu-exporter",
                        "agent_port": agent_port,
                        "refresh": "2s",
                    },
                },
            },
        )
        (tmp_path / "actuator.yml").write_text(yaml.safe_dump(config))
        stack.enter_context(
            background(
                [*gpu_reclaimer_command(), "actuator", "--config", str(tmp_path / "actuator.yml")],
                tmp_path / "actuator.log",
            )
        )
        url = f"http://127.0.0.1:{actuator_port}"
        wait_http(f"{url}/-/healthy")
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {TOKEN}"

        def case_of(pid: int) -> dict | None:
            listed = session.get(f"{url}/api/v1/cases", params={"pid": pid}, timeout=5).json()
            for c in listed["cases"]:
                return session.get(f"{url}/api/v1/cases/{c['id']}", timeout=5).json()
            return None

        def reclaimed() -> dict | None:
            case = case_of(idle_on_b.pid)
            return case if case and case["state"] in ("reclaimed", "refused", "failed") else None

        try:
            case = wait_until(reclaimed, 120, 0.5)
        except AssertionError as exc:
            logs = "\n".join(
                f"--- {p.name}\n{p.read_text()[-1500:]}" for p in tmp_path.glob("*.log")
            )
            raise AssertionError(f"{exc}\nalertmanager: {am.log_tail()}\n{logs}") from None
        assert case["state"] == "reclaimed", case
        assert case["target"]["node"] == "node-b" and case["alertname"] == "GpuProcessIdle"
        assert [s["signal"] for s in case["signals"]] == ["SIGTERM"]
        assert busy_on_a.alive() and case_of(busy_on_a.pid) is None
