"""Real workloads on a simulated node and a real gunicorn actuator, for the actuator's tests
(the fixtures that make them are in tests/actuator/conftest.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
import yaml

from actuator.config import merge_config
from actuator.live import target_of
from exporter import procfs
from exporter.sim.state import load_node, read_procs
from exporter.sim.workload import sim_run_args
from tests.actuator.settings import FAST_POLICY
from tests.support import free_port, gpu_reclaimer_command, wait_until

NODE = "sim-node"
TOKEN = "test-token-0123456789"


@dataclass
class Workload:
    proc: subprocess.Popen[bytes]
    start_time: float
    uuid: str
    start_ticks: int = 0
    exit_code: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.exit_code


def wait_quiet(pid: int, cores: float = 0.02, window: float = 0.5, timeout: float = 20) -> None:
    """Wait until the process tree's CPU use over `window` is at most `cores`."""

    def cpu() -> float:
        table = procfs.read_process_table()
        return procfs.tree_cpu_seconds(pid, table, procfs.children_map(table)) or 0.0

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu()
        time.sleep(window)
        if (cpu() - before) / window <= cores:
            return
    raise AssertionError(f"pid {pid} never went CPU-quiet")


class Workloads:
    """`gpu-reclaimer sim run` processes, reaped as soon as they exit (a zombie would still
    look like it holds its simulated memory)."""

    def __init__(self, node_dir: Path) -> None:
        self.node_dir = node_dir
        self.started: list[Workload] = []

    def uuid(self, gpu: int) -> str:
        return load_node(self.node_dir).gpus[gpu].uuid

    def spawn(
        self,
        *options: str,
        gpu: int = 0,
        memory: str = "2GiB",
        phases: str = "idle",
        cgroup: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Workload:
        """`cgroup`: a cgroup directory the process joins before it starts (a pod's); `env`:
        variables added to its environment as it is exec'd (a rank's MASTER_PORT)."""
        command = [
            *gpu_reclaimer_command(),
            *sim_run_args(self.node_dir, gpu=gpu, memory=memory, phases=phases, tick="0.2"),
            *options,
        ]
        if cgroup is not None:
            join = f'echo $$ > {cgroup}/cgroup.procs && exec "$@"'
            command = ["sh", "-c", join, "sh", *command]
        # Neither stream is a file another process writes: pytest's captured stderr is a
        # regular file the test process logs to, and its writes would read as this
        # workload's log activity.
        proc = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **env} if env else None,
        )
        w = Workload(proc, 0.0, self.uuid(gpu))
        threading.Thread(target=lambda: w.exit_code.append(proc.wait()), daemon=True).start()
        self.started.append(w)
        wait_until(lambda: any(p.pid == proc.pid for p in read_procs(self.node_dir)), 15)
        target = target_of(NODE, proc.pid, w.uuid)
        w.start_time, w.start_ticks = target.start_time, target.start_ticks
        if phases.startswith("idle") and "--cpu" not in options:
            wait_quiet(proc.pid)  # a just-started interpreter's imports read as CPU activity
        return w

    def cleanup(self) -> None:
        for w in self.started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(w.proc.pid, signal.SIGKILL)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def alert_for(
    w: Workload,
    *,
    alertname: str = "GpuProcessIdle",
    status: str = "firing",
    starts_at: float | None = None,
    start_time: float | None = None,
    start_ticks: int | None = None,
    fingerprint: str | None = None,
    node: str = NODE,
    **labels: str,
) -> dict[str, Any]:
    """An alert as the shipped rules make it: gpu_process_info's identity labels joined."""
    return {
        "status": status,
        "labels": {
            "alertname": alertname,
            "reclaim": "true",
            "severity": "warning",
            "node": node,
            "pid": str(w.pid),
            "uuid": w.uuid,
            "start_ticks": str(start_ticks or w.start_ticks),
            "boot_id": procfs.boot_id(),
            **labels,
        },
        "annotations": {"start_time": repr(start_time or w.start_time)},
        "startsAt": iso(starts_at or time.time()),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint or uuid.uuid4().hex[:16],
    }


def payload(*alerts: dict[str, Any], truncated: int = 0) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GpuProcessIdle"}',
        "truncatedAlerts": truncated,
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "receiver": "reclaim",
        "groupLabels": {"alertname": "GpuProcessIdle"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


class Actuator:
    """`gpu-reclaimer actuator` as a subprocess (gunicorn, 2 workers) on a loopback port."""

    def __init__(self, workdir: Path, sim_dir: Path, policy: dict[str, Any]) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        token_file = workdir / "token"
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        config = merge_config(
            {
                "node": {"name": NODE, "sim_dir": str(sim_dir)},
                "server": {"listen": f"127.0.0.1:{self.port}", "token_file": str(token_file)},
                "storage": {
                    "database": str(workdir / "actuator.db"),
                    "audit_log": str(workdir / "audit.jsonl"),
                },
            },
            merge_config(FAST_POLICY, policy),
        )
        self.config_file = workdir / "actuator.yml"
        self.config_file.write_text(yaml.safe_dump(config))
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {TOKEN}"
        # No idle keep-alive connection left behind: gunicorn's graceful stop waits for open
        # connections (up to the 5 s keep-alive), which made every teardown 5 s longer.
        self.session.headers["Connection"] = "close"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "actuator.log"

    def start(self) -> Actuator:
        command = [*gpu_reclaimer_command(), "actuator", "--config", str(self.config_file)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)
        wait_until(self._up, 20)
        return self

    def _up(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"actuator exited: {self.log.read_text()[-3000:]}")
        try:
            return self.session.get(self.url + "/-/healthy", timeout=1).status_code == 200
        except requests.ConnectionError:
            return False

    def kill(self) -> None:
        """SIGKILL the whole gunicorn (master and workers), like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def post(self, body: dict[str, Any]) -> requests.Response:
        return self.session.post(self.url + "/api/v1/alerts", json=body, timeout=5)

    def get(self, path: str, **params: Any) -> Any:
        r = self.session.get(self.url + path, params=params, timeout=5)
        r.raise_for_status()
        return r.json()

    def cases(self, **params: Any) -> list[dict[str, Any]]:
        return self.get("/api/v1/cases", **params)["cases"]

    def case_for(self, w: Workload) -> dict[str, Any] | None:
        for c in self.cases(pid=w.pid, limit=1000):
            assert c["target"]["pid"] == w.pid  # the filter really filters
            return self.get(f"/api/v1/cases/{c['id']}")
        return None

    def wait_state(self, w: Workload, *states: str, timeout: float = 20) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            c = self.case_for(w)
            return c if c is not None and c["state"] in states else None

        try:
            return wait_until(reached, timeout, 0.1)
        except AssertionError:
            audit = self.workdir / "audit.jsonl"
            records = audit.read_text().splitlines()[-12:] if audit.exists() else []
            raise AssertionError(
                f"case for pid {w.pid} never reached {states}: {self.case_for(w)}\n"
                + "\n".join(r[:400] for r in records)
                + f"\n{self.log.read_text()[-3000:]}"
            ) from None

    def audit(self, event: str) -> list[dict[str, Any]]:
        """The audit's records of `event` as the file holds them now."""
        path = self.workdir / "audit.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [r for r in map(json.loads, lines) if r.get("event") == event]

    def records(self, event: str, timeout: float = 10) -> list[dict[str, Any]]:
        """The audit's records of `event` once there is one: what was done after a step
        (a verification, a hand-off) is written after the state it follows is committed."""
        return wait_until(lambda: self.audit(event) or None, timeout, 0.1)

    def metric(self, name: str, **labels: str) -> float | None:
        from prometheus_client.parser import text_string_to_metric_families

        text = requests.get(self.url + "/metrics", timeout=5).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return sample.value
        return None


ActuatorFactory = Callable[..., Actuator]
