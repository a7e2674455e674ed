"""`gpu-reclaimer exporter` as users run it: a real process serving HTTP on loopback."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from exporter.sim.state import init_node
from tests.support import REPO, GiB, free_port, gpu_reclaimer_command, wait_until


@pytest.fixture
def exporter_url(sim_node: Path, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [
            *gpu_reclaimer_command(),
            "exporter",
            "--listen",
            f"127.0.0.1:{port}",
            "--sim-dir",
            str(sim_node),
            "--heartbeat-dir",
            str(tmp_path / "hb"),
            "--node-name",
            "gpu-node-1",
        ],
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _get(url + "/metrics"), timeout=15)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def _get(url: str) -> requests.Response | None:
    try:
        return requests.get(url, timeout=5)
    except requests.ConnectionError:
        return None


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    body = requests.get(url + "/metrics", timeout=10).text
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def pids(metrics: dict, name: str) -> set[int]:
    return {int(labels["pid"]) for labels, _ in metrics.get(name, [])}


def test_busy_idle_and_cpu_bound_workloads_over_http(exporter_url: str, spawn_workload) -> None:
    busy = spawn_workload(memory="6GiB", phases="busy")
    idle = spawn_workload("--name", "yolo", memory="3GiB", phases="idle")
    cpu = spawn_workload("--cpu", gpu=1, memory="2GiB", phases="idle")
    metrics = scrape(exporter_url)
    assert metrics["gpu_exporter_nvml_up"][0][1] == 1
    assert pids(metrics, "gpu_process_memory_used_bytes") == {busy.pid, idle.pid, cpu.pid}
    util = {int(lbl["pid"]): v for lbl, v in metrics["gpu_process_sm_utilization_ratio"]}
    assert util[busy.pid] > 0.8 and util[idle.pid] == 0 and util[cpu.pid] == 0
    info = {int(lbl["pid"]): lbl for lbl, _ in metrics["gpu_process_info"]}
    assert info[idle.pid]["command"] == "yolo"
    assert info[idle.pid]["node"] == "gpu-node-1"
    assert {lbl["node"] for lbl, _ in metrics["gpu_info"]} == {"gpu-node-1"}
    # The idle one is killed: every series of it is gone from the next scrape.
    idle.send_signal(signal.SIGKILL)
    idle.wait()

    def leftovers(metrics: dict) -> list[str]:
        return [
            n
            for n, samples in metrics.items()
            for lbl, _ in samples
            if lbl.get("pid") == str(idle.pid)
        ]

    after = wait_until(lambda: (m := scrape(exporter_url)) and not leftovers(m) and m, timeout=5)
    assert pids(after, "gpu_process_info") == {busy.pid, cpu.pid}


def test_landing_page_and_unknown_path(exporter_url: str) -> None:
    page = requests.get(exporter_url + "/", timeout=5)
    assert page.status_code == 200 and 'href="metrics"' in page.text
    assert requests.get(exporter_url + "/nope", timeout=5).status_code == 404


def test_nvml_missing_keeps_serving(sim_node: Path, exporter_url: str) -> None:
    subprocess.run(
        [*gpu_reclaimer_command(), "sim", "fault", str(sim_node), "--nvml-missing", "on"],
        check=True,
        capture_output=True,
    )
    metrics = wait_until(
        lambda: (m := scrape(exporter_url))["gpu_exporter_nvml_up"][0][1] == 0 and m
    )
    assert not [name for name in metrics if name.startswith("gpu_process_")]
    assert "gpu_exporter_scrape_duration_seconds" in metrics


def test_clear_errors(tmp_path: Path) -> None:
    missing = subprocess.run(
        [*gpu_reclaimer_command(), "exporter", "--sim-dir", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert missing.returncode != 0 and "sim init" in missing.stderr
    config = tmp_path / "exporter.yml"
    config.write_text("listen: ':9838'\nbogus_key: 1\n")
    bad = subprocess.run(
        [*gpu_reclaimer_command(), "exporter", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode != 0 and "exporter.yml" in bad.stderr and "bogus_key" in bad.stderr
    slow = subprocess.run(
        [*gpu_reclaimer_command(), "exporter", "--nvml-timeout", "10", "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert slow.returncode != 0 and "--nvml-timeout (nvml_timeout_seconds)" in slow.stderr
    assert "Traceback" not in slow.stderr
    negative = subprocess.run(
        [*gpu_reclaimer_command(), "exporter", "--nvml-timeout", "-1", "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert negative.returncode == 2 and "must not be negative" in negative.stderr


def test_durations_read_the_same_from_flags_and_files(tmp_path: Path) -> None:
    from exporter.cli import build_parser
    from exporter.config import load_config, validate
    from exporter.server_cli import _settings

    config = tmp_path / "exporter.yml"
    config.write_text("nvml_timeout_seconds: 800ms\n")
    assert load_config(config).nvml_timeout_seconds == 0.8
    for flag, seconds in (("1.2s", 1.2), ("500ms", 0.5), ("1", 1.0)):
        args = build_parser(["exporter"]).parse_args(["exporter", "--nvml-timeout", flag])
        assert _settings(args).nvml_timeout_seconds == seconds
    assert validate({"nvml_timeout_seconds": "1.5s"}, "x").nvml_timeout_seconds == 1.5
    demo = build_parser(["demo"]).parse_args(["demo", "--grace", "10m", "--timeout", "4m"])
    assert (demo.grace, demo.timeout) == (600.0, 240.0)


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    node = tmp_path / "n"
    init_node(node, gpus=1, memory_total=GiB, name="x")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                *gpu_reclaimer_command(),
                "exporter",
                "--sim-dir",
                str(node),
                "--listen",
                f"127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode != 0 and "cannot listen" in result.stderr


def test_help_explains_the_commands() -> None:
    result = subprocess.run(
        [*gpu_reclaimer_command(), "--help"], capture_output=True, text=True, check=True
    )
    for command in ("exporter", "sim"):
        assert command in result.stdout
    sim_help = subprocess.run(
        [*gpu_reclaimer_command(), "sim", "run", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--phases" in sim_help.stdout and "hang" in sim_help.stdout


def test_reference_config_loads() -> None:
    from exporter.config import load_config

    config = load_config(REPO / "deploy" / "exporter.yml")
    assert config.listen == ":9838" and config.nvml_timeout_seconds == 1.5


def test_probes_and_self_metrics_as_prometheus_exporters_have_them(
    sim_node: Path, exporter_url: str
) -> None:
    import shutil

    # Probes answer without an NVML scrape: even with NVML gone they say the process serves.
    subprocess.run(
        [*gpu_reclaimer_command(), "sim", "fault", str(sim_node), "--nvml-missing", "on"],
        check=True,
        capture_output=True,
    )
    for path, text in (("/-/healthy", "ok"), ("/-/ready", "ready")):
        answer = requests.get(exporter_url + path, timeout=5)
        assert answer.status_code == 200 and answer.text.strip() == text
    body = requests.get(exporter_url + "/metrics", timeout=5).text
    info = [line for line in body.splitlines() if line.startswith("gpu_exporter_build_info{")]
    assert len(info) == 1 and 'version="' in info[0] and info[0].endswith(" 1.0")
    for name in (
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
        "process_resident_memory_bytes",
    ):
        assert f"\n{name} " in body, name
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: `make setup` installs Debian's prometheus"
    # The exposition passes Prometheus' own lint.
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=body, text=True, capture_output=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
