"""The exporter's settings: command-line flags, optionally a YAML file, validated strictly."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from exporter import config_errors
from exporter.units import parse_duration

DEFAULT_PORT = 9838
# Durations read the same from flags and files: 1.5, "1.5s", "500ms" (exporter/units.py).
Seconds = Annotated[float, BeforeValidator(parse_duration)]
DEFAULT_HEARTBEAT_DIR = Path("/run/gpu-reclaimer/heartbeats")


class ExporterConfig(BaseModel):
    """Keys of the exporter's config file (all optional; flags override them)."""

    model_config = ConfigDict(extra="forbid")

    listen: str = f":{DEFAULT_PORT}"
    sim_dir: Path | None = None
    node_name: str | None = None
    heartbeat_dir: Path | None = DEFAULT_HEARTBEAT_DIR
    log_globs: list[str] = Field(default_factory=list)
    # A trusted exporter answers within 2 s, whatever the driver does.
    nvml_timeout_seconds: Seconds = Field(default=1.5, gt=0, le=1.5)
    projects_file: Path | None = None
    # The kubelet's pod-resources socket names each pod process's pod and namespace.
    pod_resources_socket: Path | None = None
    # Prometheus always asks for gzip; level 1 costs a tenth of level 9 for a body ~15 %
    # larger (benchmarks/exporter_scrape.py).
    gzip_level: int = Field(default=1, ge=1, le=9)
    # Each GPU process tree's TCP sockets (listeners, data moved): exporter/netactivity.py.
    network: bool = True
    # Bytes per minute on a tree's connections that are keep-alive, not work (docs/metrics.md).
    network_keepalive_bytes: int = Field(default=4096, ge=0)
    # The window those bytes are counted over; a tree watched for less is unknown, not quiet.
    network_window_seconds: Seconds = Field(default=60.0, gt=0, le=3600)
    # Ports a job's own ranks meet on (never a service): TCPStore's and torchrun's defaults.
    rendezvous_ports: list[int] = Field(default_factory=lambda: [29400, 29500])
    # Each GPU owner's presence: login sessions, terminal idle, notebook connections
    # (exporter/presence.py); the utmp file the login sessions are read from.
    presence: bool = True
    utmp_file: Path = Path("/var/run/utmp")

    @field_validator("rendezvous_ports")
    @classmethod
    def _ports(cls, ports: list[int]) -> list[int]:
        bad = [p for p in ports if not 0 < p < 65536]
        if bad:
            raise ValueError(f"not a TCP port: {bad[0]} (1-65535)")
        return ports


class ConfigError(Exception):
    pass


def load_config(path: Path) -> ExporterConfig:
    try:
        raw = config_errors.read_yaml(path) or {}
    except config_errors.YamlFileError as error:
        raise ConfigError(str(error)) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    return validate(raw, str(path))


def validate(raw: dict[str, object], source: str) -> ExporterConfig:
    """The settings, strictly validated; ConfigError naming `source` and the keys."""
    try:
        return ExporterConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(config_errors.describe(error, raw, source)) from None


def parse_listen(listen: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """':9838' -> ('0.0.0.0', 9838); '127.0.0.1:0' -> ('127.0.0.1', 0); '[::1]:9838'."""
    host, sep, port = listen.rpartition(":")
    if not sep:
        host, port = listen, str(default_port)
    host = host.strip("[]") or "0.0.0.0"
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"invalid listen address {listen!r}: use HOST:PORT") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"invalid port in {listen!r}")
    return host, number
