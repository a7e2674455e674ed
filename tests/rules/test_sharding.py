"""Prometheus sharded by node with `hashmod` (the relabelling docs/deployment.md gives, read
from there): two shards over two simulated nodes, each node's raw and recorded series in
exactly one shard, and each node's idle process found idle by its own shard's rules (they
join only within one node's series)."""

from __future__ import annotations

import contextlib
import hashlib
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from actuator.demo.ruleset import render_deploy
from tests.helpers.prom import background, query, require_binary, start_prometheus
from tests.support import REPO, free_port, gpu_reclaimer_command, wait_http, wait_until

pytestmark = pytest.mark.timeout(180)
SCALE = 1 / 15
SHARDS = 2


def documented_relabelling() -> list[dict[str, Any]]:
    doc = (REPO / "docs" / "deployment.md").read_text()
    block = re.search(r"<!-- shard-relabel[^>]*-->\s*```yaml\n(.*?)```", doc, re.S)
    assert block, "docs/deployment.md lost its shard-relabel block"
    relabel: list[dict[str, Any]] = yaml.safe_load(block.group(1))["relabel_configs"]
    return relabel


def shard_of(address: str, modulus: int = SHARDS) -> int:
    """Prometheus's hashmod: the last 8 bytes of the MD5, big-endian, modulo."""
    return int.from_bytes(hashlib.md5(address.encode()).digest()[8:], "big") % modulus


def test_each_node_lives_in_one_shard_and_is_judged_there(tmp_path: Path) -> None:
    require_binary("prometheus")
    cli = gpu_reclaimer_command()
    # One exporter per shard: ports drawn until their addresses hash apart.
    addresses: dict[int, str] = {}
    while len(addresses) < SHARDS:
        address = f"127.0.0.1:{free_port()}"
        addresses.setdefault(shard_of(address), address)
    nodes = {shard: f"node-{shard}" for shard in addresses}

    with contextlib.ExitStack() as stack:
        idle_pids: dict[int, str] = {}
        for shard, address in addresses.items():
            node = tmp_path / nodes[shard]
            subprocess.run(
                [*cli, "sim", "init", str(node), "--gpus", "1", "--memory", "80GiB"],
                check=True,
                capture_output=True,
                timeout=60,
            )
            exporter = [*cli, "exporter", "--listen", address, "--sim-dir", str(node)]
            exporter += ["--node-name", nodes[shard]]
            stack.enter_context(background(exporter, tmp_path / f"exporter-{shard}.log"))
            wait_http(f"http://{address}/metrics")
            run = [*cli, "sim", "run", "--dir", str(node), "--gpu", "0", "--memory", "2GiB"]
            idle = stack.enter_context(
                background([*run, "--phases", "busy=1s,idle"], tmp_path / f"idle-{shard}.log")
            )
            idle_pids[shard] = str(idle.pid)

        servers = {}
        for shard in addresses:
            config = render_deploy(
                REPO,
                tmp_path / f"shard-{shard}",
                scale=SCALE,
                exporters=list(addresses.values()),  # every shard is given every exporter
                actuator=f"127.0.0.1:{free_port()}",
                alertmanagers=[],
            )
            prom = yaml.safe_load(config.read_text())
            relabel = documented_relabelling()
            relabel[-1]["regex"] = str(shard)  # this shard's number
            (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "gpu-exporter"]
            job["relabel_configs"] = relabel
            config.write_text(yaml.safe_dump(prom, sort_keys=False))
            servers[shard] = stack.enter_context(
                start_prometheus(config, tmp_path / f"prom-{shard}")
            )

        for shard, prom in servers.items():
            mine, other = nodes[shard], nodes[1 - shard]

            def idle_here(prom: Any = prom, shard: int = shard) -> bool:
                found = query(prom.url, f'gpu_process:idle_condition{{pid="{idle_pids[shard]}"}}')
                return bool(found)

            wait_until(idle_here, timeout=90)
            # Only its own node, raw and recorded, and nothing of the other one.
            assert {s["metric"]["node"] for s in query(prom.url, "gpu_info")} == {mine}
            assert query(prom.url, f'{{node="{other}"}}') == []
            assert query(prom.url, f'{{instance="{addresses[1 - shard]}"}}') == []
            other_pid = idle_pids[1 - shard]
            assert query(prom.url, f'gpu_process:idle_condition{{pid="{other_pid}"}}') == []
