"""Start a real Prometheus (or Alertmanager) on a free loopback port and talk to it.

Used by the rules integration test; reusable by demo/e2e tests:

    with start_prometheus(config_path, tmp_path / "prom") as prom:
        wait_until(lambda: firing_alerts(prom.url, "GpuProcessIdle"), timeout=60)
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import free_port, http_get, wait_until


def require_binary(name: str) -> str:
    """Path of a system tool, or skip the test with the command that installs it."""
    import pytest

    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (run `make system-deps`)")
    return path


@dataclass
class Server:
    """A started server: its base URL, process and log file (read it when a test fails)."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def _serve(command: Sequence[str], url: str, ready_path: str, log: Path) -> Iterator[Server]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    server = Server(url=url, process=process, log=log)
    try:
        try:
            wait_until(
                lambda: process.poll() is None and http_get(url + ready_path) is not None,
                timeout=30,
            )
        except AssertionError as error:
            raise AssertionError(f"{command[0]} did not start:\n{server.log_tail()}") from error
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def start_prometheus(
    config: Path, work_dir: Path, port: int | None = None, extra_args: Sequence[str] = ()
) -> Iterator[Server]:
    """Run `prometheus` with `config` on 127.0.0.1; storage and log under `work_dir`."""
    binary = require_binary("prometheus")
    port = port or free_port()
    command = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={work_dir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
        *extra_args,
    ]
    with _serve(command, f"http://127.0.0.1:{port}", "/-/ready", work_dir / "prometheus.log") as s:
        yield s


@contextlib.contextmanager
def start_victoriametrics(work_dir: Path, port: int | None = None) -> Iterator[Server]:
    """Run VictoriaMetrics (a long-term store with Prometheus's query API) on 127.0.0.1;
    Prometheus writes to it at `URL/api/v1/write`. Data and log under `work_dir`."""
    binary = require_binary("victoria-metrics")
    port = port or free_port()
    command = [
        binary,
        f"-httpListenAddr=127.0.0.1:{port}",
        f"-storageDataPath={work_dir / 'data'}",
        "-retentionPeriod=1d",
        "-search.latencyOffset=1s",  # recent samples visible at once (default 30 s)
        "-search.disableCache",
        "-loggerLevel=WARN",
    ]
    with _serve(command, f"http://127.0.0.1:{port}", "/health", work_dir / "vm.log") as s:
        yield s


@contextlib.contextmanager
def start_alertmanager(
    config: Path, work_dir: Path, port: int | None = None, extra_args: Sequence[str] = ()
) -> Iterator[Server]:
    """Run Alertmanager (Debian: `prometheus-alertmanager`) on 127.0.0.1, clustering off."""
    binary = shutil.which("prometheus-alertmanager") or require_binary("alertmanager")
    port = port or free_port()
    command = [
        binary,
        f"--config.file={config}",
        f"--storage.path={work_dir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
        "--log.level=warn",
        *extra_args,
    ]
    log = work_dir / "alertmanager.log"
    with _serve(command, f"http://127.0.0.1:{port}", "/-/ready", log) as server:
        yield server


def api(base_url: str, path: str, **params: str) -> Any:
    """GET a Prometheus HTTP API path; return `data`, raising on an error status."""
    query = urllib.parse.urlencode(params)
    body = json.loads(http_get(f"{base_url}{path}?{query}" if query else base_url + path))
    if body.get("status") != "success":
        raise ValueError(f"{path}: {body}")
    return body["data"]


def query(base_url: str, expr: str) -> list[dict[str, Any]]:
    """Instant query; the result vector (each item has `metric` and `value`)."""
    return list(api(base_url, "/api/v1/query", query=expr)["result"])


def alerts(base_url: str, state: str | None = None) -> list[dict[str, Any]]:
    """Prometheus's active alerts (pending and firing), optionally of one state."""
    found = api(base_url, "/api/v1/alerts")["alerts"]
    return [a for a in found if state is None or a["state"] == state]


def firing_alerts(base_url: str, alertname: str) -> list[dict[str, Any]]:
    return [a for a in alerts(base_url, "firing") if a["labels"].get("alertname") == alertname]


def api_response(base_url: str, path: str, **params: str) -> dict[str, Any]:
    """GET a Prometheus HTTP API path; the whole JSON body, error or not (for assertions that
    want the error text: a bad query answers 400 with `status: error` and `error`)."""
    url = f"{base_url}{path}?{urllib.parse.urlencode(params)}"
    try:
        return dict(json.loads(http_get(url, timeout=10)))
    except urllib.error.HTTPError as error:
        body = error.read()
        try:
            return dict(json.loads(body))
        except ValueError:
            return {"status": "error", "error": f"HTTP {error.code}: {body[:500]!r}"}


def query_range(
    base_url: str, expr: str, start: float, end: float, step: float = 1.0
) -> list[dict[str, Any]]:
    """Range query; the result matrix (each item has `metric` and `values`)."""
    data = api(
        base_url, "/api/v1/query_range", query=expr, start=str(start), end=str(end), step=str(step)
    )
    return list(data["result"])


def label_values(base_url: str, label: str, match: str | None = None) -> list[str]:
    """Values of `label`, optionally only on series matching the selector `match`."""
    params = {"match[]": match} if match else {}
    return list(api(base_url, f"/api/v1/label/{label}/values", **params))


@contextlib.contextmanager
def background(
    command: Sequence[str], log: Path, ready: str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a command in its own session, output to `log`; kill that session afterwards.
    With `ready` (a URL), wait until the command serves it, failing with its log if it
    exits first (a server that could not bind its port says so here, not 30 s later)."""
    import os
    import signal

    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        if ready is not None:
            try:
                wait_until(lambda: process.poll() is None and http_get(ready) is not None, 30)
            except AssertionError as error:
                tail = log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"{command[0]} did not serve {ready}:\n{tail}") from error
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextlib.contextmanager
def backfilled_prometheus(work: Path, openmetrics: str) -> Iterator[Server]:
    """A Prometheus holding `openmetrics` (written into blocks by `promtool tsdb
    create-blocks-from openmetrics`), scraping nothing."""
    data = work / "history.om"
    data.write_text(openmetrics)
    done = subprocess.run(
        [
            require_binary("promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(data),
            str(work / "prom" / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    config = work / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")
    with start_prometheus(config, work / "prom") as prom:
        yield prom
