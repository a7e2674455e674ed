"""The whole loop on loopback: simulated node -> exporter -> Prometheus -> Alertmanager ->
actuator. The one place that starts and stops these parts (demo, end-to-end tests, bench).

    with Stack(StackOptions()) as stack:
        stack.spawn("abandoned training", name="yolo", phases="busy=5s,idle")
        ...

Prometheus and Alertmanager run the SAME deploy/ and alert-rules/ files as docker-compose,
laid out by `actuator.demo.ruleset.render_deploy` with every window x `scale` (1/15: 15 s scrapes
-> 1 s, `for: 5m` -> 20 s, group_wait 10 s -> 1 s). Every part runs in its own session and
is stopped (SIGTERM, then SIGKILL of the whole group) on exit, Ctrl-C or a failed start.
A run directory keeps each service's log, the configs, the database and the audit log.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests
import yaml

from actuator.config import merge_config
from actuator.demo.agent import SimAgent
from actuator.demo.notebook_tab import read_info, server_argv
from actuator.demo.procs import Managed, stop_all
from actuator.demo.ruleset import REFERENCE_EVAL_INTERVAL_S, format_promql_duration, render_deploy
from actuator.demo.sink import Sink
from actuator.runbook import runbook_html
from exporter.ownprocs import RUNTIME_DIR_ENV
from exporter.sim.checkpoint import CHECKPOINTS_DIR
from exporter.sim.state import PROCS_DIR, init_node, load_node, read_procs
from exporter.sim.workload import sim_run_args
from exporter.units import parse_size

# deploy/ and alert-rules/ live next to the packages in a checkout (an editable install).
REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_HINT = (
    "install them with: sudo apt-get install prometheus prometheus-alertmanager "
    "(or run `make demo-setup`)"
)
SERVICES = ("exporter", "actuator", "prometheus", "alertmanager")
REPLICA = "actuator-2"  # the second actuator replica, when there is one
AGENT = "agent"  # the node agent, when the actuators act through one


def per_node(name: str, node: int) -> str:
    """A per-node service's name: the first node's is plain, the second's ends in -2."""
    return name if node == 0 else f"{name}-{node + 1}"


class StackError(Exception):
    """The stack cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class Ports:
    """Requested ports; None picks a free one."""

    exporter: int | None = None
    actuator: int | None = None
    prometheus: int | None = None
    alertmanager: int | None = None


@dataclass(frozen=True)
class StackOptions:
    workdir: Path | None = None  # parent of the run directory (default: the temp dir)
    scale: float = 1 / 15  # every rule window, interval and Alertmanager timing x scale
    gpus: int = 2
    gpu_memory: str = "80GiB"
    node_name: str = "demo-node"  # exporter --node-name == actuator node.name
    grace: float = 15.0  # notice -> SIGTERM
    term_timeout: float = 5.0  # SIGTERM -> SIGKILL
    workers: int = 2  # actuator gunicorn workers
    ports: Ports = Ports()
    repo_root: Path = REPO_ROOT
    tick: float = 0.25  # workloads' reporting period (phase switches are this precise)
    label: str = "demo"  # run directory prefix
    policy: Mapping[str, Any] = field(default_factory=dict)  # merged over the demo policy
    # Accounts workloads may run as (root only), each with its project: the exporter and the
    # actuator map them to projects, and each is warned on the sink like the demo's user.
    users: Mapping[str, str] = field(default_factory=dict)
    # Actuator replicas: the second ("actuator-2") shares the first's store (give it a
    # PostgreSQL `storage.database` in `policy`) and audit log; Alertmanager posts every
    # alert to both, the store's lease lets one act.
    replicas: int = 1
    # The node's hands in an agent of its own (mutual TLS, certificates made for the run),
    # the actuators acting on the node only through it, as a central actuator does.
    agent: bool = False
    # Simulated nodes on this machine (2: each with its exporter and agent; needs `agent`):
    # the first is `node_name`, the second `node_name`-2.
    nodes: int = 1


@dataclass
class Workload:
    """A `gpu-reclaimer sim run` process the stack started."""

    label: str
    command: str  # how it looks (argv[0] name or python -m module)
    gpu: int
    uuid: str
    memory: int
    phases: str
    managed: Managed
    start_time: float = 0.0  # the process's start, unix seconds (as psutil sees it)
    started: float = 0.0  # when its phase clock started (time.time() at launch)
    # Run as a kernel under its owner's stand-in notebook server (actuator/demo/
    # notebook_tab.py): its PID (the managed process is the server) and the server's port.
    kernel_pid: int | None = None
    notebook_port: int | None = None

    @property
    def pid(self) -> int:
        return self.kernel_pid if self.kernel_pid is not None else self.managed.pid

    @property
    def log(self) -> Path:
        return self.managed.log

    def alive(self) -> bool:
        return self.managed.running()


def _post_to_both(alertmanager_yml: Path, first: str, second: str) -> None:
    """Every webhook that posts to the first replica posts to the second as well."""
    config = yaml.safe_load(alertmanager_yml.read_text())
    for receiver in config.get("receivers", []):
        hooks = receiver.get("webhook_configs") or []
        for hook in list(hooks):
            if f"//{first}/" in str(hook.get("url", "")):
                hooks.append({**hook, "url": hook["url"].replace(f"//{first}/", f"//{second}/")})
    alertmanager_yml.write_text(yaml.safe_dump(config, sort_keys=False))


def find_binaries() -> dict[str, str]:
    """Paths of prometheus and alertmanager, or StackError naming what is missing."""
    found = {
        "prometheus": shutil.which("prometheus"),
        "alertmanager": shutil.which("prometheus-alertmanager") or shutil.which("alertmanager"),
    }
    missing = [
        "prometheus" if name == "prometheus" else "prometheus-alertmanager"
        for name, path in found.items()
        if path is None
    ]
    if missing:
        raise StackError(f"{' and '.join(missing)} not found on PATH; {INSTALL_HINT}")
    return {name: str(path) for name, path in found.items()}


def reserve_ports(requested: Mapping[str, int | None]) -> dict[str, int]:
    """A distinct loopback port per service: the requested one if free, else any free one.

    All sockets are held until every port is chosen, so two services never get the same one.
    """
    chosen: dict[str, int] = {}
    held: list[socket.socket] = []
    try:
        for name, port in requested.items():
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            try:
                sock.bind(("127.0.0.1", port or 0))
            except OSError as exc:
                raise StackError(
                    f"port {port} requested for {name} is in use on 127.0.0.1 ({exc.strerror}); "
                    f"choose another with --{name}-port, or leave it out to use a free port"
                ) from None
            chosen[name] = int(sock.getsockname()[1])
    finally:
        for sock in held:
            sock.close()
    return chosen


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _gpu_reclaimer(*args: str) -> list[str]:
    """The `gpu-reclaimer` command, run by this interpreter (works without the console script)."""
    return [sys.executable, "-m", "exporter.cli", *args]


class Stack:
    def __init__(self, options: StackOptions | None = None) -> None:
        self.options = options or StackOptions()
        self.interval = REFERENCE_EVAL_INTERVAL_S * self.options.scale
        # The exporter's and the node's keep-alive window (60 s), scaled like the rules'.
        self.network_window = max(60 * self.options.scale, 2 * self.interval)
        self.run_dir = Path()
        self.socket_dir = Path()
        self.ports: dict[str, int] = {}
        self.services: dict[str, Managed] = {}
        self.workloads: list[Workload] = []
        self.sink = Sink()
        self.token = secrets.token_urlsafe(24)
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {self.token}"
        self._started = False

    # -- paths and URLs -------------------------------------------------------------------

    @property
    def node_dir(self) -> Path:
        return self.run_dir / "node"

    def node_dir_of(self, node: int) -> Path:
        return self.run_dir / per_node("node", node)

    def node_name_of(self, node: int) -> str:
        return per_node(self.options.node_name, node)

    @property
    def node_dirs(self) -> list[Path]:
        return [self.node_dir_of(i) for i in range(self.options.nodes)]

    @property
    def projects_file(self) -> Path:
        """The users' projects, for the exporter and the actuator (with `users` only)."""
        return self.run_dir / "projects.yml"

    def _share_with_users(self) -> None:
        """Workloads running as other accounts reach the run's simulated node (their GPU
        memory is a file there) and the heartbeats: the folders they write are shared like
        /tmp (sticky), the run's own only traversable. A folder above it that others cannot
        pass through is named, not left to a workload's timeout."""
        for parent in self.run_dir.resolve().parents:
            if not parent.stat().st_mode & 0o001:
                raise StackError(
                    f"{parent} is closed to other users, so jobs running as the day's "
                    "accounts cannot reach the run directory: choose --workdir elsewhere "
                    "(e.g. under /tmp)"
                )
        self.run_dir.chmod(0o755)
        # Jobs of the day's accounts write their own process files, heartbeats and their
        # word of the driver's checkpoint state (how a lock knows they have stopped).
        shared = [d / sub for d in self.node_dirs for sub in (PROCS_DIR, CHECKPOINTS_DIR)]
        for folder in (*shared, self.heartbeat_dir):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o1777)

    @property
    def heartbeat_dir(self) -> Path:
        return self.run_dir / "heartbeats"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def token_file(self) -> Path:
        return self.run_dir / "token"

    @property
    def owner_directory(self) -> Path:
        return self.run_dir / "actuator" / "owners.yml"

    @property
    def audit_log(self) -> Path:
        return self.run_dir / "actuator" / "audit.jsonl"

    @property
    def actuator_config(self) -> Path:
        return self.run_dir / "actuator" / "actuator.yml"

    @property
    def runbook_url(self) -> str:
        """Where the demo serves docs/runbook.md (its alerts link there)."""
        return f"{self.sink.url}/runbook"

    @property
    def keep_socket(self) -> Path:
        return self.socket_dir / "keep.sock"

    def keep_command(self, *args: str) -> list[str]:
        """`gpu-reclaimer keep ARGS` on this stack's node (as root: any owner's process)."""
        return _gpu_reclaimer("keep", *args, "--socket", str(self.keep_socket))

    def wait_command(self, *args: str) -> list[str]:
        """`gpu-reclaimer wait ARGS` on this stack's node."""
        return _gpu_reclaimer("wait", *args, "--socket", str(self.keep_socket))

    def url(self, service: str) -> str:
        scheme = "https" if service.startswith(AGENT) else "http"
        return f"{scheme}://127.0.0.1:{self.ports[service]}"

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def own_env(self) -> dict[str, str]:
        """Exporter and actuator record their identity in this run's own runtime directory."""
        return {**os.environ, RUNTIME_DIR_ENV: str(self.run_dir / "runtime")}

    def start(self) -> Stack:
        """Start every part and wait until each answers; on any failure stop what started."""
        options = self.options
        binaries = find_binaries()
        for sub in ("deploy/prometheus.yml", "deploy/alertmanager.yml", "alert-rules"):
            if not (options.repo_root / sub).exists():
                raise StackError(
                    f"{options.repo_root / sub} not found: the demo uses the repository's "
                    "deploy/ and alert-rules/; run it from a checkout (pip install -e .)"
                )
        if options.replicas not in (1, 2):
            raise StackError(f"replicas: 1 or 2, not {options.replicas}")
        requested = {name: getattr(options.ports, name) for name in SERVICES}
        if options.replicas == 2:
            requested[REPLICA] = None
        if options.nodes not in (1, 2) or (options.nodes == 2 and not options.agent):
            raise StackError("nodes: 1, or 2 with an agent on each")
        for i in range(1, options.nodes):
            requested[per_node("exporter", i)] = None
        for i in range(options.nodes if options.agent else 0):
            requested[per_node(AGENT, i)] = None
        self.ports = reserve_ports(requested)
        parent = options.workdir or Path(tempfile.gettempdir())
        parent.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(
            tempfile.mkdtemp(prefix=f"gpu-reclaimer-{options.label}-{stamp}-", dir=parent)
        )
        # A unix socket's path is short (108 bytes): the keep socket lives in /tmp.
        self.socket_dir = Path(tempfile.mkdtemp(prefix="gpu-reclaimer-"))
        self._started = True
        try:
            self._start(binaries)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, binaries: Mapping[str, str]) -> None:
        options = self.options
        for node_dir in self.node_dirs:
            init_node(
                node_dir, options.gpus, parse_size(options.gpu_memory), "NVIDIA H100 80GB HBM3"
            )
        self.heartbeat_dir.mkdir(parents=True, exist_ok=True)
        if options.users:
            self._share_with_users()
        # Created 0600 from the start: the token is never readable by others, even briefly.
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self.token + "\n")
        self.sink.pages["/runbook"] = runbook_html(options.repo_root / "docs" / "runbook.md")
        self.sink.start()
        self.owner_directory.parent.mkdir(parents=True, exist_ok=True)
        owners = [
            f"  {getpass.getuser()}: {{name: 演示用户, wecom: demo-owner, language: zh-CN, "
            "timezone: Asia/Shanghai}"
        ]
        owners += [f"  {user}: {{name: {user}, wecom: {user}}}" for user in options.users]
        self.owner_directory.write_text("users:\n" + "\n".join(owners) + "\n", encoding="utf-8")
        exporter_projects = ["--projects", str(self.projects_file)] if options.users else []
        if options.users:
            by_project: dict[str, list[str]] = {}
            for user, project in options.users.items():
                by_project.setdefault(project, []).append(user)
            self.projects_file.write_text(
                yaml.safe_dump(
                    {"projects": [{"name": p, "users": u} for p, u in by_project.items()]}
                ),
                encoding="utf-8",
            )

        for i in range(options.nodes):
            exporter = per_node("exporter", i)
            self.services[exporter] = Managed(
                exporter,
                _gpu_reclaimer(
                    "exporter",
                    "--listen",
                    f"127.0.0.1:{self.ports[exporter]}",
                    "--sim-dir",
                    str(self.node_dir_of(i)),
                    "--node-name",
                    self.node_name_of(i),
                    "--heartbeat-dir",
                    str(self.heartbeat_dir),
                    # the keep-alive window, scaled like the rules' (a tree watched for
                    # less is unknown, never quiet)
                    "--network-window",
                    f"{self.network_window:g}s",
                    *exporter_projects,
                ),
                self.logs_dir / f"{exporter}.log",
                self.own_env,
            )

        self.actuator_config.parent.mkdir(parents=True, exist_ok=True)
        self.actuator_config.write_text(
            "# Written by actuator/demo/stack.py for this run: enforce mode on a simulated node,\n"
            "# timings compressed like the rules. Reference: deploy/actuator.yml.\n"
            + yaml.safe_dump(self.policy(), sort_keys=False)
        )
        self.services["actuator"] = Managed(
            "actuator",
            _gpu_reclaimer(
                "actuator",
                "--config",
                str(self.actuator_config),
                "--listen",
                f"127.0.0.1:{self.ports['actuator']}",
                "--token-file",
                str(self.token_file),
            ),
            self.logs_dir / "actuator.log",
            self.own_env,
        )

        if options.replicas == 2:
            self._add_replica()
        if options.agent:
            for i in range(options.nodes):
                self._add_agent(i)

        prom_config = render_deploy(
            options.repo_root,
            self.run_dir / "config",
            scale=options.scale,
            exporters=[
                f"127.0.0.1:{self.ports[per_node('exporter', i)]}" for i in range(options.nodes)
            ],
            actuator=f"127.0.0.1:{self.ports['actuator']}",
            alertmanagers=[f"127.0.0.1:{self.ports['alertmanager']}"],
            chat_url=f"{self.sink.url}/chat",
            token_file=self.token_file,
            runbook_base=self.runbook_url,
            extra_scrape_configs=[
                {
                    "job_name": "prometheus",
                    "static_configs": [{"targets": [f"127.0.0.1:{self.ports['prometheus']}"]}],
                }
            ],
        )
        if options.replicas == 2:
            _post_to_both(
                prom_config.parent / "alertmanager.yml",
                f"127.0.0.1:{self.ports['actuator']}",
                f"127.0.0.1:{self.ports[REPLICA]}",
            )
        self.services["alertmanager"] = Managed(
            "alertmanager",
            [
                binaries["alertmanager"],
                f"--config.file={prom_config.parent / 'alertmanager.yml'}",
                f"--storage.path={self.run_dir / 'alertmanager-data'}",
                f"--web.listen-address=127.0.0.1:{self.ports['alertmanager']}",
                "--cluster.listen-address=",  # no gossip port: a single local instance
                "--log.level=warn",
            ],
            self.logs_dir / "alertmanager.log",
        )
        self.services["prometheus"] = Managed(
            "prometheus",
            [
                binaries["prometheus"],
                f"--config.file={prom_config}",
                f"--storage.tsdb.path={self.run_dir / 'prometheus-data'}",
                f"--web.listen-address=127.0.0.1:{self.ports['prometheus']}",
                "--log.level=warn",
            ],
            self.logs_dir / "prometheus.log",
        )

        # Start all, then wait for each: their start-up times overlap.
        for managed in self.services.values():
            managed.start()
        ready = {
            **{
                per_node(AGENT, i): "/-/healthy"
                for i in range(options.nodes if options.agent else 0)
            },
            **{per_node("exporter", i): "/metrics" for i in range(options.nodes)},
            "actuator": "/-/ready",
            **({REPLICA: "/-/ready"} if options.replicas == 2 else {}),
            "alertmanager": "/-/ready",
            "prometheus": "/-/ready",
        }
        for name, path in ready.items():
            self._wait_ready(name, path)

    def _add_replica(self) -> None:
        """The second replica: the same policy on its own port, without the node's keep
        socket (one process serves that path)."""
        policy = self.policy()
        policy["server"] = {
            **policy["server"],
            "listen": f"127.0.0.1:{self.ports[REPLICA]}",
            "keep_socket": None,
        }
        config = self.actuator_config.with_name("actuator-2.yml")
        config.write_text(
            "# The second replica of this run (actuator/demo/stack.py).\n"
            + yaml.safe_dump(policy, sort_keys=False)
        )
        self.services[REPLICA] = Managed(
            REPLICA,
            _gpu_reclaimer(
                "actuator", "--config", str(config), "--token-file", str(self.token_file)
            ),
            self.logs_dir / f"{REPLICA}.log",
            self.own_env,
        )

    @property
    def certs_dir(self) -> Path:
        return self.run_dir / "certs"

    def _agents_policy(self) -> dict[str, Any]:
        """The actuators act on the node only through its agent."""
        certs = self.certs_dir
        return {
            "agents": {
                "tls": {
                    "ca_file": str(certs / "ca.pem"),
                    "certfile": str(certs / "actuator.pem"),
                    "keyfile": str(certs / "actuator.key"),
                },
                "static": {
                    self.node_name_of(i): self.url(per_node(AGENT, i))
                    for i in range(self.options.nodes)
                },
                "timeout": "2s",
                "unreachable_wait": "10s",
            }
        }

    def _add_agent(self, index: int) -> None:
        from actuator.fleet import certs

        node, agent = self.node_name_of(index), per_node(AGENT, index)
        if index == 0:
            certs.make_ca(self.certs_dir)
            certs.issue_actuator(self.certs_dir)
        certs.issue_agent(self.certs_dir, node, ips=("127.0.0.1",))
        config = self.run_dir / "agent" / f"{agent}.yml"
        config.parent.mkdir(parents=True, exist_ok=True)
        policy = self.policy()
        node_settings = {k: v for k, v in policy["node"].items() if k in ("projects_file",)}
        config.write_text(
            "# The node's agent for this run (actuator/demo/stack.py).\n"
            + yaml.safe_dump({"protect": policy["protect"], "node": node_settings})
        )
        self.services[agent] = Managed(
            agent,
            _gpu_reclaimer(
                *SimAgent(
                    node=node,
                    listen=f"127.0.0.1:{self.ports[agent]}",
                    config=config,
                    sim_dir=self.node_dir_of(index),
                    heartbeat_dir=self.heartbeat_dir,
                    certs_dir=self.certs_dir,
                    journal=self.run_dir / "agent" / f"{agent}.db",
                ).arguments()
            ),
            self.logs_dir / f"{agent}.log",
            self.own_env,
        )

    def _probe(self, name: str, path: str) -> bool:
        if name.startswith(AGENT):  # mutual TLS: the actuator's certificate
            with requests.Session() as client:
                client.trust_env = False
                client.verify = str(self.certs_dir / "ca.pem")
                client.cert = (
                    str(self.certs_dir / "actuator.pem"),
                    str(self.certs_dir / "actuator.key"),
                )
                return client.get(self.url(name) + path, timeout=2).status_code == 200
        return requests.get(self.url(name) + path, timeout=2).status_code == 200

    def _wait_ready(self, name: str, path: str, timeout: float = 45.0) -> None:
        managed = self.services[name]
        deadline = time.monotonic() + timeout
        while True:
            if not managed.running():
                raise StackError(
                    f"{name} exited during start-up; its log ({managed.log}):\n{managed.log_tail()}"
                )
            with contextlib.suppress(requests.RequestException):
                if self._probe(name, path):
                    return
            if time.monotonic() > deadline:
                raise StackError(
                    f"{name} did not answer {path} within {timeout:g}s; its log "
                    f"({managed.log}):\n{managed.log_tail()}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every workload and service this stack started (idempotent)."""
        if not self._started:
            return
        # All at once: each waits for the slowest, not for the sum (a stubborn job that
        # ignores SIGTERM costs its 3 s once, not once per job).
        stop_all([w.managed for w in self.workloads], timeout=3)
        stop_all(
            [
                self.services[n]
                for n in ("prometheus", "alertmanager", "actuator", REPLICA)
                if n in self.services
            ]
            + [
                managed for n, managed in self.services.items() if n.startswith((AGENT, "exporter"))
            ],
            timeout=10,
        )
        self.sink.stop()
        self.session.close()
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        self._started = False

    # -- the actuator's policy for this run -------------------------------------------------

    def policy(self) -> dict[str, Any]:
        options = self.options
        uid = os.geteuid()
        base: dict[str, Any] = {
            "mode": "enforce",
            "defaults": {
                "idle_for": "0s",
                "min_runtime": "0s",  # the demo's workloads start idle on purpose
                "grace": _seconds(options.grace),
                "term_timeout": _seconds(options.term_timeout),
                "kill_timeout": "5s",
                "release_timeout": "5s",
            },
            # The rules guarantee >= window + for of quiet logs at firing (24 s at 1/15); the
            # live re-check's log threshold is scaled the same way (5m x scale).
            "idle": {
                "log_quiet_for": format_promql_duration(max(300 * options.scale, 2 * self.interval))
            },
            # Lowered only as far as the user running the demo needs: tests and CI run as
            # root. Only processes listed on the *simulated* GPUs can ever be targeted.
            "protect": {
                "protect_root": uid != 0,
                "protected_uid_below": min(1000, uid),
            },
            # The demo's cast is idle on purpose and reclaims several jobs in a minute.
            "limits": {"terminations_per_node_per_hour": 1000, "terminations_per_minute": 100},
            "breaker": {"min_flagged": 1000},
            "node": {
                "name": options.node_name,
                "sim_dir": str(self.node_dir),
                "heartbeat_dir": str(self.heartbeat_dir),
                "network_window": f"{self.network_window:g}s",
                **({"projects_file": str(self.projects_file)} if options.users else {}),
            },
            # The owner (whoever runs the demo) is warned in Chinese on a WeCom-format robot
            # that the sink stands in for; the warning carries a keep link to this actuator.
            "notifier": {
                "directory": str(self.owner_directory),
                "wecom": {"url": f"{self.sink.url}/notice", "timeout": "2s"},
                "public_url": self.url("actuator"),
                "sre_contact": "GPU 运维（演示）",
            },
            "server": {
                "listen": f"127.0.0.1:{self.ports['actuator']}",
                "workers": options.workers,
                "token_file": str(self.token_file),
                # `gpu-reclaimer keep` and `gpu-reclaimer wait` on the demo's node
                "keep_socket": str(self.keep_socket),
                # Stopping waits for open connections (Alertmanager keeps one alive): a
                # demo on loopback has no long request to let finish.
                "graceful_timeout": "1s",
            },
            "storage": {
                "database": str(self.run_dir / "actuator" / "actuator.db"),
                "audit_log": str(self.audit_log),
            },
            # A warned case's re-checks while it waits, scaled like every other interval.
            "reconciler": {
                "interval": "0.25s",
                "lease_ttl": "5s",
                "recheck_waiting": f"{max(0.25, 5 * options.scale):g}s",
            },
            **(self._agents_policy() if options.agent else {}),
            # The actuator's decisions go to Alertmanager, which routes them to chat.
            "alertmanager": {
                "urls": [self.url("alertmanager")],
                "external_url": self.url("actuator"),
                "runbook_url": self.runbook_url,
            },
        }
        return merge_config(base, options.policy)

    # -- workloads ------------------------------------------------------------------------

    def spawn(
        self,
        label: str,
        *,
        phases: str,
        gpu: int = 0,
        memory: str = "4GiB",
        name: str | None = None,
        module: str | None = None,
        heartbeat: bool = False,
        ignore_sigterm: bool = False,
        cpu: bool = False,
        children: int = 0,
        log: bool = True,
        wait: bool = True,
        user: str | None = None,
        node: int = 0,
        notebook: bool = False,
    ) -> Workload:
        """Start `gpu-reclaimer sim run` on this node. Its stdout is its log file (the log the
        exporter and actuator watch); `log=False` sends it to /dev/null: no log at all.
        `user`: one of the stack's `users` it runs as (default: whoever runs the stack).
        `notebook`: run it as the kernel of `user`'s stand-in notebook server (a tab may
        then connect to `notebook_port`)."""
        if user is not None and user not in self.options.users:
            raise StackError(f"{user!r} is not one of this stack's users")
        node_dir = self.node_dir_of(node)
        args = sim_run_args(
            node_dir, gpu=gpu, memory=memory, phases=phases, tick=_seconds(self.options.tick)
        )
        if name:
            args += ["--name", name]
        if module:
            args += ["--module", module]
        if heartbeat:
            args += ["--heartbeat", "--heartbeat-dir", str(self.heartbeat_dir)]
        if ignore_sigterm:
            args.append("--ignore-sigterm")
        if cpu:
            args.append("--cpu")
        if children:
            args += ["--children", str(children)]
        slug = "".join(c if c.isalnum() else "-" for c in label.lower())
        output = self.logs_dir / "workloads" / f"{slug}.log" if log else Path(os.devnull)
        if user is not None:
            args += ["--user", user]  # switches once started: root's interpreter may be closed
        command = _gpu_reclaimer(*args)
        info = self.run_dir / "notebook" / f"{slug}-{time.time_ns()}.info"
        if notebook:
            if user is None:
                raise StackError("a notebook server runs as its owner: name the user")
            command = server_argv(self.run_dir / "notebook", user, info, command)
        managed = Managed(label, command, output, reap=True)
        workload = Workload(
            label=label,
            command=name or (f"python -m {module}" if module else "sim run"),
            gpu=gpu,
            uuid=load_node(node_dir).gpus[gpu].uuid,
            memory=parse_size(memory),
            phases=phases,
            managed=managed,
        )
        workload.started = time.time()
        managed.start()
        self.workloads.append(workload)
        if notebook:
            workload.notebook_port, workload.kernel_pid = read_info(info)
        with contextlib.suppress(psutil.Error):
            workload.start_time = psutil.Process(workload.pid).create_time()
        if wait:
            self.wait_for(
                lambda: any(p.pid == workload.pid for p in read_procs(node_dir)),
                timeout=20,
                what=f"workload {label!r} to report on the simulated GPU",
            )
        return workload

    # -- faults and services (for tests) ----------------------------------------------------

    def fault(self, *args: str, node: int = 0) -> None:
        """`gpu-reclaimer sim fault NODE ARGS` (e.g. "--nvml-missing", "on")."""
        subprocess.run(
            _gpu_reclaimer("sim", "fault", str(self.node_dir_of(node)), *args),
            check=True,
            capture_output=True,
            timeout=30,
        )

    def kill_service(self, name: str) -> None:
        self.services[name].kill()

    def restart_service(self, name: str) -> None:
        managed = self.services[name]
        managed.stop()
        managed.start()
        path = (
            "/metrics"
            if name.startswith("exporter")
            else "/-/healthy"
            if name.startswith(AGENT)
            else "/-/ready"
        )
        self._wait_ready(name, path)

    # -- small API clients ------------------------------------------------------------------

    def actuator_api(self, path: str, **params: Any) -> Any:
        response = self.session.get(self.url("actuator") + path, params=params, timeout=5)
        response.raise_for_status()
        return response.json()

    def prometheus_api(self, path: str, **params: Any) -> Any:
        response = requests.get(self.url("prometheus") + path, params=params, timeout=5)
        response.raise_for_status()
        body = response.json()
        if body.get("status") != "success":
            raise ValueError(f"{path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.prometheus_api("/api/v1/query", query=expr)["result"])

    def wait_scraped(self, timeout: float = 30.0) -> None:
        """Until Prometheus has scraped the exporter successfully (the loop is closed)."""
        self.wait_for(
            lambda: self.query('up{job="gpu-exporter"} == 1'),
            timeout=timeout,
            what="Prometheus to scrape the exporter",
        )

    @staticmethod
    def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(requests.RequestException, ValueError, OSError):
                value = predicate()
                if value:
                    return value
            if time.monotonic() > deadline:
                raise StackError(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(0.2)

    def where_to_look(self) -> list[tuple[str, str]]:
        """(what, where) lines for the user."""
        return [
            ("Prometheus (alerts, rules)", self.url("prometheus") + "/alerts"),
            ("Alertmanager", self.url("alertmanager")),
            ("actuator API", self.url("actuator") + "/api/v1/cases"),
            ("actuator token", f"{self.token}  (file {self.token_file})"),
            ("audit log", str(self.audit_log)),
            ("exporter", self.url("exporter") + "/metrics"),
            ("run directory (logs, configs)", str(self.run_dir)),
        ]
