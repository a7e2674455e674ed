"""The Grafana dashboards: well-formed, and every panel's query works on real data.

No Grafana here, so the dashboards are checked the way Grafana would use them: the static
checks read the JSON (ids, data sources, targets, variables, layout); the live checks start a
real Prometheus (rules rendered at scale 1/15: 1 s scrapes, 4 s windows) scraping a real
`gpu-reclaimer exporter` on a simulated node with real workloads, and a real
`gpu-reclaimer actuator` that reclaims one of them, then run every panel query, annotation
and variable query through Prometheus's HTTP API with the template variables substituted as
Grafana would: "All" (`.*`) and concrete values.

Workloads (node `simnode`, leak mode on so an exited process's memory stays used):

  busy     GPU 0, util ~95 %, heartbeats and log lines      -> nothing
  idle     GPU 1, busy 1 s then nothing                      -> GpuProcessIdle (pending)
  hang     GPU 1, busy 1 s with heartbeats, then util 100 %  -> GpuProcessStalled (pending)
  leaker   GPU 1, 6 GiB, killed at once                      -> orphaned memory
  victim   GPU 1, idle; an alert for it is posted to the actuator (enforce, fast timings),
           which terminates it                               -> released, memory freed
  flip     GPU 1, busy 1 s with log lines, idle 10 s, then util 100 % -> idle, then stalled:
           both conditions for one process within the range
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from actuator.config import merge_config
from actuator.demo.ruleset import render_deploy
from actuator.live import target_of
from exporter.sim.state import init_node, load_node, read_procs
from exporter.sim.workload import sim_run_args
from tests.actuator.settings import FAST_POLICY
from tests.helpers.previews import previews_module
from tests.helpers.prom import (
    Server,
    api_response,
    background,
    label_values,
    query,
    require_binary,
    start_prometheus,
)
from tests.support import REPO, GiB, free_port, gpu_reclaimer_command, wait_http, wait_until

GRAFANA = REPO / "grafana"
DASHBOARD_FILES = sorted((GRAFANA / "dashboards").glob("*.json"))
FLEET = GRAFANA / "dashboards" / "gpu-reclaimer-fleet.json"
ACTUATOR = GRAFANA / "dashboards" / "gpu-reclaimer-actuator.json"
DS_REF = {"type": "prometheus", "uid": "${datasource}"}

SCALE = 1 / 15
# Grafana's $__rate_interval is max(4 x scrape interval, $__interval + scrape interval); with
# the data source's scrape interval at the rendered 1 s (15 s x 1/15), that is 4 s.
RATE_INTERVAL = "4s"
NODE = "simnode"
PROJECT = "vision"  # the exporter's project mapping: default_project
TOKEN = "dashboard-test-token-0123456789"

# Grafana's own variables that may appear in a query.
BUILTIN_VARIABLES = {
    "__rate_interval",
    "__interval",
    "__interval_ms",
    "__range",
    "__range_s",
    "__range_ms",
    "__all",
}
VARIABLE_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


# --- reading the dashboards ------------------------------------------------------------------


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those inside collapsed rows."""
    found: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in all_panels(dashboard) if p["type"] != "row"]


def variables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(dashboard["templating"]["list"])


def variable_query(variable: dict[str, Any]) -> str:
    raw = variable["query"]
    return str(raw["query"] if isinstance(raw, dict) else raw)


def referenced(text: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in VARIABLE_RE.finditer(text)}


def expand(expr: str, values: dict[str, str], range_s: int, interval_s: int = 1) -> str:
    """Substitute template variables as Grafana does for a Prometheus query."""
    builtins = {
        "__rate_interval": RATE_INTERVAL,
        "__interval": f"{interval_s}s",
        "__interval_ms": str(interval_s * 1000),
        "__range": f"{range_s}s",
        "__range_s": str(range_s),
        "__range_ms": str(range_s * 1000),
    }
    table = {**builtins, **values}

    def substitute(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name not in table:
            raise AssertionError(f"undefined variable ${name} in {expr!r}")
        return table[name]

    return VARIABLE_RE.sub(substitute, expr)


def grafana_regex(value: str) -> str:
    """A selected value as Grafana writes it into a Prometheus query for a multi-value
    variable: regex specials escaped, with the backslash doubled inside the PromQL string."""
    value = value.replace("\\", "\\\\\\\\")
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


def all_values(dashboard: dict[str, Any]) -> dict[str, str]:
    """Every query variable at "All" (its allValue, `.*`), custom ones at their default."""
    values = {v["name"]: v["allValue"] for v in variables(dashboard) if v["type"] == "query"}
    values |= {
        v["name"]: v["current"]["value"] for v in variables(dashboard) if v["type"] == "custom"
    }
    return values


# --- static checks ---------------------------------------------------------------------------


def test_there_are_the_two_dashboards() -> None:
    assert [p.name for p in DASHBOARD_FILES] == [
        "gpu-reclaimer-actuator.json",
        "gpu-reclaimer-fleet.json",
    ]
    uids = [load(p)["uid"] for p in DASHBOARD_FILES]
    assert len(set(uids)) == len(uids)
    assert load(FLEET)["title"] == "GPU Reclaimer — fleet"
    assert load(ACTUATOR)["title"] == "GPU Reclaimer — actuator"


def test_the_json_is_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location(
        "generate_dashboards", GRAFANA / "generate_dashboards.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rendered = module.render()
    assert sorted(rendered) == [p.name for p in DASHBOARD_FILES]
    for path in DASHBOARD_FILES:
        assert path.read_text(encoding="utf-8") == rendered[path.name], (
            f"{path.name} is stale: run python grafana/generate_dashboards.py"
        )


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_dashboard_structure(path: Path) -> None:
    dashboard = load(path)
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] and len(dashboard["uid"]) <= 40
    assert "id" not in dashboard or dashboard["id"] is None  # provisioned: Grafana assigns it

    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    assert all(isinstance(i, int) and i > 0 for i in ids)

    panels = query_panels(dashboard)
    assert len(panels) >= 10
    titles = [p["title"] for p in panels]
    assert len(titles) == len(set(titles)), f"duplicate titles: {titles}"
    for panel in panels:
        where = f"{path.name}: panel {panel['id']} {panel['title']!r}"
        assert panel["title"] and panel.get("description"), where
        assert panel["datasource"] == DS_REF, where
        assert panel["targets"], where
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), where
        for t in panel["targets"]:
            assert t["datasource"] == DS_REF, where
            assert t["expr"].strip(), where
        if any(tr["id"] == "merge" for tr in panel.get("transformations", [])):
            # Grafana merges table frames of instant queries row by row.
            assert all(t["instant"] and t["format"] == "table" for t in panel["targets"]), where

    # The grid: 24 columns, no two panels overlap.
    cells: dict[tuple[int, int], int] = {}
    for panel in all_panels(dashboard):
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps panel {cells[(x, y)]}"
                cells[(x, y)] = panel["id"]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_every_variable_used_is_defined_before_use(path: Path) -> None:
    dashboard = load(path)
    defined: set[str] = set()
    for variable in variables(dashboard):
        if variable["type"] == "query":
            used = referenced(variable_query(variable)) | referenced(variable["datasource"]["uid"])
            assert used <= defined | BUILTIN_VARIABLES, (variable["name"], used - defined)
            assert variable["includeAll"] and variable["allValue"] == ".*"
        defined.add(variable["name"])

    assert "datasource" in defined
    texts = [t["expr"] for p in query_panels(dashboard) for t in p["targets"]]
    texts += [a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a]
    for text in texts:
        missing = referenced(text) - defined - BUILTIN_VARIABLES
        assert not missing, f"undefined {missing} in {text!r}"


def test_fleet_variables_are_node_gpu_user_project() -> None:
    names = [v["name"] for v in variables(load(FLEET))]
    assert names == ["datasource", "node", "gpu", "user", "project", "utc_offset"]
    (offset,) = [v for v in variables(load(FLEET)) if v["name"] == "utc_offset"]
    assert offset["current"]["value"] in offset["query"].split(",")


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_grafanas_dashboard_model_reads_every_panel(path: Path) -> None:
    """grafana-foundation-sdk (Grafana's generated dashboard model) decodes the JSON: every
    panel with its typed options and field config, every Prometheus query typed."""
    from grafana_foundation_sdk.cog import plugins
    from grafana_foundation_sdk.cog.runtime import UnknownDataquery
    from grafana_foundation_sdk.models.dashboard import Dashboard, RowPanel
    from grafana_foundation_sdk.models.prometheus import Dataquery

    plugins.register_default_plugins()
    raw = load(path)
    model = Dashboard.from_json(raw)
    assert model.uid == raw["uid"] and model.title == raw["title"]
    assert len(model.panels) == len(raw["panels"])
    for decoded, panel in zip(model.panels, raw["panels"], strict=True):
        if panel["type"] == "row":
            assert isinstance(decoded, RowPanel)
            continue
        assert decoded.type_val == panel["type"] and decoded.title == panel["title"]
        # A known panel type's options decode into its model class, not a bare dict.
        assert not isinstance(decoded.options, dict), panel["title"]
        for typed, target in zip(decoded.targets, panel["targets"], strict=True):
            assert isinstance(typed, Dataquery) and not isinstance(typed, UnknownDataquery)
            assert typed.expr == target["expr"] and typed.ref_id == target["refId"]
    assert model.to_json()["panels"]  # and it encodes back


def test_provisioning_points_at_the_dashboards_and_the_default_data_source() -> None:
    sources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    prometheus = [d for d in sources["datasources"] if d["type"] == "prometheus"]
    assert len(prometheus) == 1 and prometheus[0]["isDefault"]
    for path in DASHBOARD_FILES:
        (ds_var,) = [v for v in variables(load(path)) if v["type"] == "datasource"]
        assert ds_var["query"] == "prometheus"
        assert ds_var["current"]["value"] == prometheus[0]["uid"]

    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/gpu-reclaimer.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")


def test_key_recording_rules_are_used_and_exist() -> None:
    rules_text = (REPO / "alert-rules" / "gpu-reclaimer.rules.yml").read_text()
    recorded = set(re.findall(r"record:\s*(\S+)", rules_text))
    exprs = "\n".join(t["expr"] for p in query_panels(load(FLEET)) for t in p["targets"])
    used = set(re.findall(r"\b([a-z_]\w*(?::\w+)+)", exprs))
    assert used, "the fleet dashboard should use the rules' recording rules"
    assert used <= recorded, f"not recorded by the rules: {used - recorded}"
    for name in (
        "gpu:memory_unaccounted_bytes",
        "gpu_process:cpu_usage_cores:rate_window",
        "instance:gpu_exporter_healthy:window",
        "gpu_process:idle_condition",
    ):
        assert name in used


# --- the live stack --------------------------------------------------------------------------


@dataclass
class Stack:
    prom: Server
    actuator_url: str
    started: float  # when Prometheus started scraping
    pids: dict[str, int] = field(default_factory=dict)
    uuids: dict[int, str] = field(default_factory=dict)
    logs: Path = Path()

    def range_s(self) -> int:
        return int(time.time() - self.started) + 5

    def diagnostics(self) -> str:
        parts = [f"prometheus log:\n{self.prom.log_tail()}"]
        for name in ("exporter.log", "actuator.log"):
            log = self.logs / name
            if log.exists():
                parts.append(f"{name}:\n{log.read_text(errors='replace')[-2000:]}")
        return "\n".join(parts)


def _actuator_config(work: Path, node_dir: Path, port: int) -> Path:
    token = work / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    overrides = {
        "node": {"name": NODE, "sim_dir": str(node_dir)},
        "server": {
            "listen": f"127.0.0.1:{port}",
            "token_file": str(token),
            "workers": 1,
            "keep_socket": str(work / "keep.sock"),
        },
        "storage": {"database": str(work / "actuator.db"), "audit_log": str(work / "audit.jsonl")},
        # A demand source, so the demand panels have their series (nobody waits: 0).
        "demand": {"wait_list": True, "interval": "1s"},
    }
    path = work / "actuator.yml"
    path.write_text(yaml.safe_dump(merge_config(FAST_POLICY, overrides)))
    return path


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _alert(pid: int, uuid: str, node: str = NODE) -> dict[str, Any]:
    target = target_of(node, pid, uuid)
    return {
        "status": "firing",
        "labels": {
            "alertname": "GpuProcessIdle",
            "reclaim": "true",
            "severity": "warning",
            "class": "idle",
            "node": node,
            "pid": str(pid),
            "uuid": uuid,
            "start_ticks": str(target.start_ticks),
            "boot_id": target.boot_id,
        },
        "annotations": {"start_time": repr(target.start_time)},
        "startsAt": _iso(time.time()),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": f"{pid:016x}",
    }


def _webhook(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GpuProcessIdle"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "gpu-reclaimer-actuator",
        "groupLabels": {"alertname": "GpuProcessIdle"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


def _instant(prom: Server, expr: str) -> list[dict[str, Any]]:
    return query(prom.url, expr)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("dashboards")
    cli = gpu_reclaimer_command()
    node_dir, heartbeats = tmp / "node", tmp / "heartbeats"
    heartbeats.mkdir()
    init_node(
        node_dir, gpus=2, memory_total=80 * GiB, name="NVIDIA H100 80GB HBM3", leak_on_exit=True
    )
    uuids = {gpu.index: gpu.uuid for gpu in load_node(node_dir).gpus}
    hb = ("--heartbeat", "--heartbeat-dir", str(heartbeats))

    def workload(phases: str, *options: str, gpu: int, memory: str = "4GiB") -> list[str]:
        return [
            *cli,
            *sim_run_args(node_dir, gpu=gpu, memory=memory, phases=phases, tick="0.2"),
            *options,
        ]

    def registered(pid: int) -> bool:
        return any(p.pid == pid for p in read_procs(node_dir))

    projects = tmp / "projects.yml"
    projects.write_text(f"default_project: {PROJECT}\n")
    exporter_port, actuator_port = free_port(), free_port()
    exporter_cmd = [
        *cli,
        "exporter",
        "--listen",
        f"127.0.0.1:{exporter_port}",
        "--sim-dir",
        str(node_dir),
        "--heartbeat-dir",
        str(heartbeats),
        "--node-name",
        NODE,
        "--projects",
        str(projects),
    ]
    actuator_cmd = [
        *cli,
        "actuator",
        "--config",
        str(_actuator_config(tmp, node_dir, actuator_port)),
    ]
    prom_config = render_deploy(
        REPO,
        tmp / "run",
        scale=SCALE,
        exporters=[f"127.0.0.1:{exporter_port}"],
        actuator=f"127.0.0.1:{actuator_port}",
        alertmanagers=[],
    )

    with contextlib.ExitStack() as stack:
        pids: dict[str, int] = {}
        # The leaker exits at once; in leak mode its 6 GiB stay used on GPU 1: orphaned.
        leaker = stack.enter_context(
            background(workload("busy", gpu=1, memory="6GiB"), tmp / "leaker.log")
        )
        wait_until(lambda: registered(leaker.pid), 15)
        os.killpg(leaker.pid, signal.SIGKILL)
        leaker.wait(timeout=10)
        for name, command, log in [
            ("busy", workload("busy", *hb, gpu=0), tmp / "busy.log"),
            ("idle", workload("busy=1s,idle", gpu=1, memory="6GiB"), tmp / "idle.log"),
            ("hang", workload("busy=1s,hang", *hb, gpu=1), tmp / "hang.log"),
            ("victim", workload("idle", gpu=1, memory="2GiB"), Path(os.devnull)),
        ]:
            pids[name] = stack.enter_context(background(command, log)).pid
        for pid in pids.values():
            wait_until(lambda pid=pid: registered(pid), 15)

        stack.enter_context(background(exporter_cmd, tmp / "exporter.log"))
        stack.enter_context(background(actuator_cmd, tmp / "actuator.log"))
        wait_http(f"http://127.0.0.1:{exporter_port}/metrics")
        actuator_url = f"http://127.0.0.1:{actuator_port}"
        wait_http(f"{actuator_url}/-/ready")

        started = time.time()
        prom = stack.enter_context(start_prometheus(prom_config, tmp / "prom"))
        # Idle, then hung once Prometheus has recorded it idle (its cue): one process meets
        # both conditions in the range, however slowly the machine runs.
        flip = workload("busy=1s,idle=cue,hang", gpu=1, memory="1GiB")
        pids["flip"] = stack.enter_context(background(flip, tmp / "flip.log")).pid
        live = Stack(prom, actuator_url, started, pids, uuids, tmp)
        try:
            # A few scrapes of the actuator first, so increase() sees the counters move.
            wait_until(
                lambda: _instant(
                    prom, 'count_over_time(up{job="gpu-reclaimer-actuator"}[1m]) >= 3'
                ),
                timeout=20,
            )
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {TOKEN}"
            hook = f"{actuator_url}/api/v1/alerts"
            ok = session.post(hook, json=_webhook(_alert(pids["victim"], uuids[1])), timeout=5)
            assert ok.status_code == 200, ok.text
            # A node this actuator does not serve: recorded, then refused.
            other = _alert(pids["busy"], uuids[0], node="elsewhere")
            assert session.post(hook, json=_webhook(other), timeout=5).status_code == 200
            # Bad input and a missing token: the webhook codes panel shows them.
            assert session.post(hook, json={"version": "4"}, timeout=5).status_code == 422
            assert requests.post(hook, json=_webhook(), timeout=5).status_code == 401

            # The victim is terminated and its memory released; Prometheus scrapes that.
            wait_until(lambda: _instant(prom, "gpu_released_success_total >= 1"), timeout=30)
            # The actuator's counters, scraped a few times since these cases: increase() over
            # the hourly panels' 12 s needs two samples.
            for counter in ("gpu_idle_detected_total", "gpu_memory_freed_bytes_total"):
                wait_until(
                    lambda c=counter: _instant(
                        prom, f'count_over_time({c}{{job="gpu-reclaimer-actuator"}}[1m]) >= 3'
                    ),
                    timeout=30,
                )
            wait_until(lambda: _instant(prom, 'gpu_reclaimer_refusals_total{reason!=""}'), 15)
            # The flip process's idle phase is recorded before it turns stalled.
            wait_until(
                lambda: _instant(prom, f'gpu_process:idle_condition{{pid="{pids["flip"]}"}}'),
                timeout=60,
            )
            os.kill(pids["flip"], signal.SIGUSR1)  # now hang
            # The idle and hung processes' alerts are pending.
            for alertname, name in (
                ("GpuProcessIdle", "idle"),
                ("GpuProcessStalled", "hang"),
                ("GpuProcessStalled", "flip"),
            ):
                wait_until(
                    lambda a=alertname, n=name: _instant(
                        prom, f'ALERTS{{alertname="{a}", pid="{pids[n]}"}}'
                    ),
                    timeout=30,
                )
        except AssertionError as error:
            raise AssertionError(f"{error}\n{live.diagnostics()}") from error
        yield live


def panel_interval_s(panel: dict[str, Any]) -> int:
    """Grafana's $__interval for the panel here: its minimum interval at the rules' scale
    (an hourly panel's hour is 240 s), else the 1 s scrape."""
    minimum = panel.get("interval")
    if not minimum:
        return 1
    number, unit = int(minimum[:-1]), minimum[-1]
    return max(1, round(number * {"s": 1, "m": 60, "h": 3600}[unit] * SCALE))


def _run_target(
    stack: Stack,
    target: dict[str, Any],
    values: dict[str, str],
    panel: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one Grafana target the way Grafana would; the API's whole answer."""
    range_s = stack.range_s()
    expr = expand(target["expr"], values, range_s, panel_interval_s(panel or {}))
    if target.get("instant"):
        return api_response(stack.prom.url, "/api/v1/query", query=expr)
    end = time.time()
    return api_response(
        stack.prom.url,
        "/api/v1/query_range",
        query=expr,
        start=str(end - range_s),
        end=str(end),
        step="1",
    )


def _check_dashboard(stack: Stack, path: Path, values: dict[str, str]) -> list[str]:
    """Run every panel target; return the ones that came back empty ("title [refId]")."""
    empty: list[str] = []
    for panel in query_panels(load(path)):
        for target in panel["targets"]:
            answer = _run_target(stack, target, values, panel)
            where = f"{path.name}: {panel['title']!r} [{target['refId']}] {values}"
            assert answer.get("status") == "success", f"{where}: {answer}\n{target['expr']}"
            if not answer["data"]["result"]:
                empty.append(f"{panel['title']} [{target['refId']}]")
    return empty


def _concrete_fleet_values(stack: Stack) -> dict[str, str]:
    (info,) = _instant(stack.prom, f'gpu_process_info{{pid="{stack.pids["idle"]}"}}')
    return {
        "node": NODE,
        "gpu": "1",
        "user": grafana_regex(info["metric"]["user"]),
        "project": PROJECT,
        "utc_offset": "8",
    }


def test_fleet_variables_resolve_to_the_simulated_node(stack: Stack) -> None:
    dashboard = load(FLEET)
    values = all_values(dashboard)
    resolved: dict[str, set[str]] = {}
    for variable in variables(dashboard):
        if variable["type"] != "query":
            continue
        found = re.fullmatch(
            r"label_values\((?:(.+),\s*)?(\w+)\)", expand(variable_query(variable), values, 60)
        )
        assert found, variable_query(variable)
        selector, label = found.groups()
        resolved[variable["name"]] = set(label_values(stack.prom.url, label, selector))
    assert resolved["node"] == {NODE}
    assert resolved["gpu"] == {"0", "1"}
    assert resolved["user"] and "" not in resolved["user"]
    assert resolved["project"] == {PROJECT}


def test_every_fleet_query_is_valid_and_returns_data(stack: Stack) -> None:
    """Every target of every panel, with all nodes/GPUs/users and with one of each."""
    for values in (all_values(load(FLEET)), _concrete_fleet_values(stack)):
        empty = _check_dashboard(stack, FLEET, values)
        assert not empty, f"no data with {values}: {empty}\n{stack.diagnostics()}"


def test_fleet_panels_show_the_workloads(stack: Stack) -> None:
    values = all_values(load(FLEET))
    panels = {p["title"]: p for p in query_panels(load(FLEET))}

    def instant(title: str, ref: str = "A") -> list[dict[str, Any]]:
        (target,) = [t for t in panels[title]["targets"] if t["refId"] == ref]
        return _instant(stack.prom, expand(target["expr"], values, stack.range_s()))

    # Joined identity on per-process rows; the idle and hung processes flagged in the table.
    rows = {r["metric"]["pid"]: r for r in instant("GPU processes", "A")}
    assert {str(stack.pids[n]) for n in ("busy", "idle", "hang")} <= rows.keys()
    assert rows[str(stack.pids["busy"])]["metric"]["node"] == NODE
    assert {"user", "command"} <= rows[str(stack.pids["busy"])]["metric"].keys()
    assert rows[str(stack.pids["busy"])]["metric"]["project"] == PROJECT
    flagged = {r["metric"]["pid"]: r["value"][1] for r in instant("GPU processes", "G")}
    assert flagged.get(str(stack.pids["idle"])) in {"1", "2"}  # idle pending / firing
    assert flagged.get(str(stack.pids["hang"])) in {"3", "4"}  # stalled pending / firing
    assert str(stack.pids["busy"]) not in flagged
    # Heartbeats: only the busy and hung processes have them.
    beats = {r["metric"]["pid"] for r in instant("GPU processes", "D")}
    assert beats == {str(stack.pids["busy"]), str(stack.pids["hang"])}
    # The leaker's 6 GiB (plus the driver's reserve) belong to no process: over the threshold
    # (> 2 GiB and > 5 % of 80 GiB) on GPU 1; GPU 0 only has the driver's reserve.
    (orphaned,) = instant("Orphaned memory")
    assert 6 * GiB <= float(orphaned["value"][1]) < 7 * GiB
    per_gpu = {
        r["metric"]["gpu"]: float(r["value"][1])
        for r in instant("Orphaned memory (device used - sum of processes)")
    }
    assert per_gpu["1"] >= 6 * GiB and 0 < per_gpu["0"] < 1 * GiB
    (held,) = instant("Memory held by idle or stalled processes")
    assert float(held["value"][1]) >= 6 * GiB  # at least the idle process's 6 GiB
    (gpus,) = instant("GPUs")
    assert gpus["value"][1] == "2"
    # The flip process met both conditions in the range: the per-user and per-project panels
    # must still answer (two series of one process used to collide in them).
    flip = stack.pids["flip"]
    for rule in ("gpu_process:idle_condition", "gpu_process:stalled_condition"):
        assert _instant(stack.prom, f'count_over_time({rule}{{pid="{flip}"}}[{stack.range_s()}s])')
    # Idle time: GPU 1 holds the idle and hung processes, GPU 0 only the busy one.
    shares = {r["metric"]["gpu"]: float(r["value"][1]) for r in instant("Idle GPU time per GPU")}
    assert shares["1"] == 1.0 and shares["0"] == 0.0
    top = {r["metric"]["pid"] for r in instant("Top idle holders now")}
    assert {str(stack.pids["idle"]), str(stack.pids["hang"])} <= top
    assert str(stack.pids["busy"]) not in top
    (hours,) = instant("Idle GPU-hours by project")
    assert hours["metric"]["project"] == PROJECT and float(hours["value"][1]) > 0
    # The hour-of-day heatmap's values are hours on the operator's clock.
    (target,) = panels["Idle GPU time by hour of day"]["targets"]
    shifted = expand(target["expr"], values | {"utc_offset": "8"}, stack.range_s())
    utc_hour = datetime.now(UTC).hour
    got = {float(r["value"][1]) for r in _instant(stack.prom, shifted)}
    assert got <= {float((utc_hour + 8) % 24), float((utc_hour + 9) % 24)}, got  # hour turning
    assert got


def test_fleet_annotation_query_is_valid(stack: Stack) -> None:
    dashboard = load(FLEET)
    queries = [a for a in dashboard["annotations"]["list"] if "expr" in a]
    assert queries
    for annotation in queries:
        answer = _run_target(stack, annotation, all_values(dashboard))
        assert answer["status"] == "success", answer


def test_every_actuator_query_is_valid_and_returns_data(stack: Stack) -> None:
    for values in (all_values(load(ACTUATOR)), {"instance": grafana_regex(stack.actuator_url[7:])}):
        empty = _check_dashboard(stack, ACTUATOR, values)
        assert not empty, f"no data with {values}: {empty}\n{stack.diagnostics()}"


def test_actuator_panels_show_the_reclaim(stack: Stack) -> None:
    values = all_values(load(ACTUATOR))
    panels = {p["title"]: p for p in query_panels(load(ACTUATOR))}

    def value(title: str) -> float:
        (target,) = panels[title]["targets"][:1]
        (sample,) = _instant(stack.prom, expand(target["expr"], values, stack.range_s()))
        return float(sample["value"][1])

    assert value("GPUs released") >= 1
    assert value("Idle processes detected") >= 2
    assert value("GPU memory freed") >= 2 * GiB
    assert value("Releases failed") == 0
    assert value("Circuit breaker") == 0
    assert value("Actuator") == 1
    assert value("Owners warned") >= 1  # the victim was warned before its grace period
    median = value("Time to reclaim")
    assert 0 < median <= 30  # the fast policy reclaims within seconds
    (refusals,) = panels["Refusals by reason (time range)"]["targets"]
    reasons = _instant(stack.prom, expand(refusals["expr"], values, stack.range_s()))
    # The refused case (a node this actuator does not serve) has its series. Its increase() is
    # 0 here: the actuator creates a reason's series at its first refusal, and Prometheus
    # cannot count a counter's first sample (see docs/deployment.md, "Dashboards").
    assert "unknown_node" in {r["metric"]["reason"] for r in reasons}
    codes = _instant(stack.prom, 'gpu_reclaimer_webhook_requests_total{code=~"200|401|422"}')
    assert {r["metric"]["code"] for r in codes} == {"200", "401", "422"}
    signals = _instant(stack.prom, 'gpu_reclaimer_signals_sent_total{signal="SIGTERM"}')
    assert signals and float(signals[0]["value"][1]) >= 1


def test_the_previews_are_in_the_docs_and_the_readme() -> None:
    previews = previews_module()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name, titles in previews.PREVIEWS.items():
        png = REPO / "docs" / "previews" / name.replace(".json", ".png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert f"docs/previews/{png.name}" in readme
        present = {p["title"] for p in query_panels(load(GRAFANA / "dashboards" / name))}
        assert set(titles) <= present, set(titles) - present


def test_the_previews_run_exactly_the_dashboards_queries(stack: Stack, tmp_path: Path) -> None:
    from prometheus_api_client import PrometheusConnect

    previews = previews_module()
    end = time.time()
    # The stack's history is under a minute: panels' minimum intervals (up to 5m) at 1/300,
    # so an hourly panel steps every 12 s. A range query's steps start at the range's start;
    # a whole number of steps puts the last one at `end`, over the last 12 s of scrapes. Else
    # it can fall up to 11 s earlier, over the stack's first seconds, when a slow machine's
    # Prometheus has not yet scraped the actuator twice (a CI run found those panels empty).
    hourly_step = round(3600 / 300)
    span = math.ceil(stack.range_s() / hourly_step) * hourly_step
    queries = previews.render(
        PrometheusConnect(stack.prom.url), end - span, end, tmp_path, 1, 1 / 300
    )
    for name, titles in previews.PREVIEWS.items():
        panels = {p["title"]: p for p in query_panels(load(GRAFANA / "dashboards" / name))}
        expected = [
            (t, target["refId"], target["expr"]) for t in titles for target in panels[t]["targets"]
        ]
        assert [(q.panel, q.ref, q.expr) for q in queries if q.panel in titles] == expected
        png = tmp_path / name.replace(".json", ".png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert not [f"{q.panel} [{q.ref}] {q.expanded}" for q in queries if not q.result]
