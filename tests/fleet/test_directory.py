"""Resolving an alert's node to an agent: static map, the exporters a real Prometheus
scrapes, the URL template; and node names that could point a URL elsewhere."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from actuator.fleet.directory import AgentResolver, NodeDirectory, PrometheusAgents
from actuator.fleet.remote import ClientTls
from tests.helpers.prom import backfilled_prometheus

TLS = ClientTls("ca.pem", "actuator.pem", "actuator.key")


@pytest.mark.parametrize(
    "forged",
    [
        "evil.example:443/x",
        "a/b",
        "node a",
        "node@evil",
        "",
        "-node",
        "x" * 300,
        "ノード",
        "node-a.",
        "node-a?x=1",
        "node-a#",
    ],
)
def test_a_node_name_that_is_not_a_host_name_never_makes_a_url(forged: str) -> None:
    resolver = AgentResolver(TLS, url_template="https://{node}:9837")
    assert resolver.get(forged) is None
    assert forged not in NodeDirectory(None, resolver)


def test_the_static_map_comes_first_then_the_template() -> None:
    resolver = AgentResolver(
        TLS, static={"gpu-1": "https://10.0.0.1:9837"}, url_template="https://{node}.dc:9837"
    )
    assert resolver.url("gpu-1") == "https://10.0.0.1:9837"
    assert resolver.url("gpu-2") == "https://gpu-2.dc:9837"
    assert AgentResolver(TLS, static={"gpu-1": "https://h:1"}).url("gpu-2") is None


def test_agents_are_found_beside_the_exporters_prometheus_scrapes(tmp_path: Path) -> None:
    now = int(time.time())
    lines = ["# TYPE gpu_info gauge"]
    for node, instance in (
        ("node-a", "10.1.2.3:9838"),
        ("node-b", "gpu-b.dc:9838"),
        ("evil/x", "10.9.9.9:9838"),
    ):
        for ts in range(now - 120, now, 15):
            lines.append(
                f'gpu_info{{job="gpu-exporter",instance="{instance}",node="{node}",gpu="0",'
                f'uuid="GPU-{node}"}} 1 {ts}'
            )
    lines.append('gpu_info{job="other",instance="10.0.0.9:1",node="node-z",gpu="0"} 1 ' + str(now))
    with backfilled_prometheus(tmp_path, "\n".join(lines) + "\n# EOF\n") as prom:
        agents = PrometheusAgents(prom.url, "gpu-exporter", agent_port=9837)
        assert agents.urls() == {
            "node-a": "https://10.1.2.3:9837",
            "node-b": "https://gpu-b.dc:9837",
        }
        resolver = AgentResolver(TLS, prometheus=agents)
        assert resolver.url("node-a") == "https://10.1.2.3:9837"
        assert resolver.url("node-z") is None  # another job's series
    # Prometheus gone: the nodes already known stay known.
    agents._at = float("-inf")
    assert agents.urls() == {
        "node-a": "https://10.1.2.3:9837",
        "node-b": "https://gpu-b.dc:9837",
    }


def test_the_reference_agent_config_and_the_actuator_s_agents_block_validate() -> None:
    import re

    import yaml

    from actuator.config import ActuatorConfig
    from actuator.fleet.agent_config import load_agent_config
    from tests.support import REPO

    agent = load_agent_config(REPO / "deploy" / "agent.yml")
    assert agent.tls is not None and agent.listen.endswith(":9837")
    assert agent.protect.protect_root  # the reference protects root
    text = (REPO / "deploy" / "actuator.yml").read_text()
    data = yaml.safe_load(text)
    # The commented optional sections, each from "# key:" to the next blank line.
    for key in ("agents", "kubernetes", "slurm"):
        block = text[text.index(f"# {key}:") :].split("\n\n", 1)[0]
        uncommented = "\n".join(re.sub(r"^# ?", "", line) for line in block.splitlines())
        data[key] = yaml.safe_load(uncommented)[key]
    config = ActuatorConfig.model_validate(data)
    assert config.agents is not None and config.agents.prometheus is not None
    assert config.agents.unreachable_give_up == 3600
    assert config.kubernetes is not None and config.kubernetes.action == "evict"
    assert config.slurm is not None and config.slurm.action == "cancel"
