"""`gpu-reclaimer exporter`: wire NVML, /proc readers and the HTTP server together."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from exporter import ownprocs
from exporter.argtypes import CommandError
from exporter.config import (
    DEFAULT_PORT,
    ConfigError,
    ExporterConfig,
    load_config,
    parse_listen,
    validate,
)
from exporter.nvml import SIM_DIR_ENV, open_nvml, resolve_sim_dir

log = logging.getLogger("exporter")


def add_commands(commands: Any) -> None:
    parser = commands.add_parser(
        "exporter",
        help="serve per-GPU and per-process metrics for Prometheus",
        description="Serve /metrics with per-GPU and per-process GPU metrics from NVML and "
        "/proc. It observes only; it never signals a process.",
        epilog=f"Without a GPU, point it at a simulated node: --sim-dir DIR or {SIM_DIR_ENV}=DIR "
        "(create one with 'gpu-reclaimer sim init DIR').",
    )
    parser.add_argument("--config", type=Path, help="YAML file with the settings below")
    parser.add_argument(
        "--listen", help=f"address to serve on, HOST:PORT (default :{DEFAULT_PORT})"
    )
    parser.add_argument("--sim-dir", type=Path, help="use a simulated node instead of NVML")
    parser.add_argument(
        "--node-name", help="node label on gpu_info/gpu_process_info (default: the hostname)"
    )
    parser.add_argument(
        "--heartbeat-dir",
        type=Path,
        help="directory of heartbeat files (default /run/gpu-reclaimer/heartbeats)",
    )
    parser.add_argument(
        "--log-glob",
        action="append",
        dest="log_globs",
        metavar="GLOB",
        help="open files matching GLOB count as the process's log (repeatable)",
    )
    parser.add_argument(
        "--nvml-timeout",
        metavar="DURATION",
        help="a hanging NVML call is given up after this (e.g. 1.5, 1.5s, 800ms; at most 1.5s)",
    )
    parser.add_argument("--projects", type=Path, help="YAML mapping users/groups to projects")
    parser.add_argument(
        "--pod-resources-socket",
        type=Path,
        metavar="PATH",
        help="the kubelet's pod-resources socket, to name each pod process's pod and namespace "
        "(on Kubernetes: /var/lib/kubelet/pod-resources/kubelet.sock)",
    )
    parser.add_argument(
        "--gzip-level", type=int, metavar="1-9", help="gzip level when a scraper asks (default 1)"
    )
    parser.add_argument(
        "--no-network",
        dest="network",
        action="store_const",
        const=False,
        help="do not read the GPU processes' TCP sockets (listeners, data moved)",
    )
    parser.add_argument(
        "--network-keepalive-bytes",
        type=int,
        metavar="BYTES",
        help="bytes per minute on a process tree's connections that count as keep-alive, "
        "not work (default 4096)",
    )
    parser.add_argument(
        "--network-window",
        dest="network_window",
        metavar="DURATION",
        help="the window keep-alive bytes are counted over; a process tree watched for less "
        "is unknown, never quiet (default 60s)",
    )
    parser.add_argument(
        "--rendezvous-port",
        dest="rendezvous_ports",
        type=int,
        action="append",
        metavar="PORT",
        help="a port a job's own ranks meet on, never a service (repeatable; default 29400 "
        "and 29500, torchrun's and TCPStore's; ports bound to 0 and MASTER_PORT always are)",
    )
    parser.add_argument(
        "--no-presence",
        dest="presence",
        action="store_const",
        const=False,
        help="do not export the GPU owners' presence (login sessions, terminal idle, "
        "connections to their notebook servers)",
    )
    parser.add_argument(
        "--utmp",
        dest="utmp_file",
        type=Path,
        metavar="PATH",
        help="the utmp file login sessions are read from (default /var/run/utmp; in a "
        "container, the host's, mounted read-only)",
    )
    parser.set_defaults(func=run_exporter)


# config key -> (flag, argparse dest): flags override the file's keys.
_FLAGS = {
    "listen": ("--listen", "listen"),
    "sim_dir": ("--sim-dir", "sim_dir"),
    "node_name": ("--node-name", "node_name"),
    "heartbeat_dir": ("--heartbeat-dir", "heartbeat_dir"),
    "log_globs": ("--log-glob", "log_globs"),
    "nvml_timeout_seconds": ("--nvml-timeout", "nvml_timeout"),
    "projects_file": ("--projects", "projects"),
    "gzip_level": ("--gzip-level", "gzip_level"),
    "pod_resources_socket": ("--pod-resources-socket", "pod_resources_socket"),
    "network": ("--no-network", "network"),
    "network_keepalive_bytes": ("--network-keepalive-bytes", "network_keepalive_bytes"),
    "network_window_seconds": ("--network-window", "network_window"),
    "rendezvous_ports": ("--rendezvous-port", "rendezvous_ports"),
    "presence": ("--no-presence", "presence"),
    "utmp_file": ("--utmp", "utmp_file"),
}


def _settings(args: argparse.Namespace) -> ExporterConfig:
    config = load_config(args.config) if args.config else ExporterConfig()
    overrides = {key: getattr(args, dest) for key, (_, dest) in _FLAGS.items()}
    given = {k: v for k, v in overrides.items() if v is not None}
    # Flags are validated like the file's keys, by the same model and parsers (model_copy
    # would skip validation); errors name the flag.
    try:
        return validate({**config.model_dump(), **given}, "command line")
    except ConfigError as error:
        message = str(error)
        for key in given:
            message = message.replace(f"\n  {key}:", f"\n  {_FLAGS[key][0]} ({key}):")
        raise ConfigError(message) from None


def run_exporter(args: argparse.Namespace) -> int:
    from exporter.collector import ExporterSettings, GpuCollector
    from exporter.identity import IdentityCache, ProjectMapping, ProjectMappingError
    from exporter.nvml_reader import NvmlReader
    from exporter.web import build_app, serve

    try:
        config = _settings(args)
        host, port = parse_listen(config.listen)
        mapping = ProjectMapping.load(config.projects_file) if config.projects_file else None
    except (ConfigError, ProjectMappingError, ValueError) as error:
        raise CommandError(str(error)) from None
    sim_dir = resolve_sim_dir(config.sim_dir)
    if sim_dir is not None and not (sim_dir / "node.json").exists():
        raise CommandError(
            f"{sim_dir} is not a simulated node: create it with 'gpu-reclaimer sim init {sim_dir}'"
        )
    nvml = open_nvml(sim_dir)
    reader = NvmlReader(nvml)
    probe = reader.read()
    if not probe.up and sim_dir is None:
        log.error(
            "NVML is not available (%s). On a GPU node install the NVIDIA driver; without a "
            "GPU use --sim-dir DIR. Serving anyway with gpu_exporter_nvml_up 0.",
            probe.error,
        )
    node = config.node_name or socket.gethostname()
    settings = ExporterSettings(
        node_name=node,
        heartbeat_dir=config.heartbeat_dir,
        log_globs=tuple(config.log_globs),
        nvml_timeout=config.nvml_timeout_seconds,
        network=config.network,
        network_floor=config.network_keepalive_bytes,
        network_window=config.network_window_seconds,
        rendezvous_ports=frozenset(config.rendezvous_ports),
        presence=config.presence,
        utmp=config.utmp_file,
    )
    registry = CollectorRegistry(auto_describe=False)
    pods = None
    if config.pod_resources_socket is not None:
        from exporter.kube.pod_resources import PodResources

        pods = PodResources(config.pod_resources_socket)
    collector = GpuCollector(reader, settings, IdentityCache(mapping, pods=pods))
    registry.register(collector)
    source = f"simulated node {sim_dir}" if sim_dir else "NVML"
    app = build_app(registry, node, source, collector.exposition, config.gzip_level)
    try:
        server = serve(app, host, port)
    except OSError as error:
        raise CommandError(f"cannot listen on {config.listen}: {error}") from None
    log.info(
        "exporter serving http://%s:%d/metrics (%s, %d GPU(s))",
        host,
        server.server_port,
        source,
        len(probe.gpus),
    )
    own = ownprocs.register("exporter")  # the actuator never signals us or our ancestors
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    ownprocs.unregister(own)
    log.info("exporter stopped")
    return 0
