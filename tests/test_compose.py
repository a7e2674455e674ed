"""docker-compose.yml, Dockerfile and the systemd units, checked without a Docker engine.

What can be checked here is checked against the real files: every bind-mounted path exists
(or is documented as created by the user), Prometheus finds its rules and targets through
the mounts exactly as laid out, the targets, the webhook URL and the credentials file agree
with the services, the ports agree with the README and docs/deployment.md, the services'
commands parse with the real `gpu-reclaimer` CLI, and the mounted actuator config is valid.
The real `docker-compose config` (Compose 1, from Debian) validates the file, and
`docker compose config` too where the Compose 2 plugin is installed.
"""

from __future__ import annotations

import configparser
import glob
import posixpath
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from exporter.cli import build_parser
from tests.helpers.prom import require_binary
from tests.support import REPO, gpu_reclaimer_command

COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DEPLOYMENT_DOC = REPO / "docs" / "deployment.md"
SERVICES = {"prometheus", "alertmanager", "grafana", "exporter", "actuator"}
# The port table: DESIGN.md section 5, README, docs/deployment.md.
PORTS = {"exporter": 9838, "actuator": 9836, "agent": 9837}
# Host paths outside the repository that the user (or Docker) provides; each must be
# explained in docs/deployment.md.
HOST_PATHS = {
    "/run/gpu-reclaimer/heartbeats",
    "/run/gpu-reclaimer/self",
    "/etc/passwd",
    "/etc/group",
}
# Repository paths the user creates (git-ignored); each must be explained in the doc.
USER_CREATED = {"deploy/secrets/actuator-token", "deploy/secrets/grafana-admin-password"}
HEARTBEAT_DIR = "/run/gpu-reclaimer/heartbeats"


def _interpolate(value: Any) -> Any:
    """Compose's `${VAR:-default}` with the defaults (the environment is not consulted)."""
    if isinstance(value, str):

        def default(match: re.Match[str]) -> str:
            if match.group(2) is None:
                raise AssertionError(f"${{{match.group(1)}}} has no default in {value!r}")
            return match.group(2)

        return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", default, value)
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return dict(_interpolate(data))


def service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(compose["services"][name])


def mounts(svc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(source, target, mode) of each short-syntax volume."""
    found = []
    for entry in svc.get("volumes", []):
        assert isinstance(entry, str), f"use the short syntax: {entry}"
        parts = entry.split(":")
        source, target = parts[0], parts[1]
        found.append((source, target, parts[2] if len(parts) > 2 else "rw"))
    return found


def host_path(svc: dict[str, Any], container_path: str) -> str:
    """The host (or repository-relative) path behind a container path, through the mounts."""
    container_path = posixpath.normpath(container_path)
    for source, target, _ in sorted(mounts(svc), key=lambda m: -len(m[1])):
        if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
            rest = container_path[len(target) :].lstrip("/")
            path = posixpath.normpath(posixpath.join(source, rest))
            return f"./{path}" if source.startswith("./") else path
    raise AssertionError(f"{container_path} is not mounted into the container")


def repo_file(compose_relative: str) -> Path:
    assert compose_relative.startswith("./") or not compose_relative.startswith("/")
    return REPO / compose_relative.removeprefix("./")


def flag(command: list[str], name: str) -> str:
    """The value of `--name=VALUE` (or `--name VALUE`) in a command list."""
    for i, arg in enumerate(command):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name:
            return command[i + 1]
    raise AssertionError(f"{name} not in {command}")


def listen_port(compose: dict[str, Any], name: str) -> int:
    """The port a service listens on inside its container, from its command line."""
    svc = service(compose, name)
    if name == "grafana":
        return int(svc.get("environment", {}).get("GF_SERVER_HTTP_PORT", 3000))
    command = svc["command"]
    option = "--listen" if name in {"exporter", "actuator"} else "--web.listen-address"
    return int(flag(command, option).rsplit(":", 1)[1])


def published(svc: dict[str, Any]) -> dict[int, int]:
    """container port -> host port."""
    ports = {}
    for entry in svc.get("ports", []):
        *_, host, container = str(entry).split(":")
        ports[int(container)] = int(host)
    return ports


def doc_text() -> str:
    return DEPLOYMENT_DOC.read_text()


# --- the file itself ---------------------------------------------------------------------------


def test_compose_parses_and_has_the_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES
    for name in SERVICES:
        svc = service(compose, name)
        assert svc.get("image") or svc.get("build"), name


def test_every_bind_mount_exists_or_is_documented(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    doc = doc_text()
    for name, svc in compose["services"].items():
        for source, target, mode in mounts(svc):
            assert target.startswith("/"), (name, target)
            assert mode in {"ro", "rw"}, (name, mode)
            if source.startswith("/"):
                assert source in HOST_PATHS, f"{name}: unexpected host path {source}"
                assert source in doc, f"{source} is not explained in docs/deployment.md"
            elif source.startswith("."):
                assert repo_file(source).exists(), f"{name}: {source} missing"
            else:
                assert source in declared, f"{name}: named volume {source} not declared"
    for secret in compose.get("secrets", {}).values():
        path = secret["file"].removeprefix("./")
        if not (REPO / path).exists():
            assert path in USER_CREATED, path
        assert path in doc, f"docs/deployment.md must say how to create {path}"
    # ... and the user-created files stay out of git.
    ignored = (REPO / ".gitignore").read_text().split()
    for path in USER_CREATED:
        assert any(path.startswith(rule.lstrip("/")) for rule in ignored if rule.endswith("/"))


def test_deployment_doc_shows_how_to_create_the_secret_and_the_heartbeat_dir() -> None:
    doc = doc_text()
    assert "> deploy/secrets/actuator-token" in doc  # the one-liner that writes it
    assert "deploy/systemd/gpu-reclaimer-heartbeats.conf" in doc
    assert "nvidia-ctk" in doc  # the NVIDIA Container Toolkit


# --- Prometheus and Alertmanager see the same files as the demo --------------------------------


def test_prometheus_finds_its_rules_and_targets_through_the_mounts(
    compose: dict[str, Any],
) -> None:
    prom = service(compose, "prometheus")
    config_in_container = flag(prom["command"], "--config.file")
    assert host_path(prom, config_in_container) == "./deploy/prometheus.yml"
    config = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    config_dir = posixpath.dirname(config_in_container)

    def resolve(relative: str) -> str:
        return host_path(prom, posixpath.join(config_dir, relative))

    for pattern in config["rule_files"]:
        assert glob.glob(str(repo_file(resolve(pattern)))), f"no rules behind {pattern}"
    files = [
        f
        for section in (config["scrape_configs"], config["alerting"]["alertmanagers"])
        for job in section
        for sd in job.get("file_sd_configs", [])
        for f in sd["files"]
    ]
    assert files
    for relative in files:
        assert repo_file(resolve(relative)).is_file(), relative


def _targets(name: str) -> list[str]:
    groups = yaml.safe_load((REPO / "deploy" / "targets" / name).read_text())
    return [t for group in groups for t in group["targets"]]


def test_scrape_and_alerting_targets_are_the_services(compose: dict[str, Any]) -> None:
    for file, svc in [
        ("gpu-exporter.yml", "exporter"),
        ("actuator.yml", "actuator"),
        ("alertmanager.yml", "alertmanager"),
    ]:
        for target in _targets(file):
            host, port = target.rsplit(":", 1)
            assert host == svc, f"deploy/targets/{file}: {target}"
            assert int(port) == listen_port(compose, svc), f"deploy/targets/{file}: {target}"
    config = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    (self_scrape,) = [j for j in config["scrape_configs"] if j["job_name"] == "prometheus"]
    (target,) = self_scrape["static_configs"][0]["targets"]
    assert int(target.rsplit(":", 1)[1]) == listen_port(compose, "prometheus")


def test_alertmanager_reaches_the_actuator_with_its_token(compose: dict[str, Any]) -> None:
    am = service(compose, "alertmanager")
    config_in_container = flag(am["command"], "--config.file")
    assert host_path(am, config_in_container) == "./deploy/alertmanager.yml"
    config = yaml.safe_load((REPO / "deploy" / "alertmanager.yml").read_text())
    (receiver,) = [r for r in config["receivers"] if r["name"] == "gpu-reclaimer-actuator"]
    (webhook,) = receiver["webhook_configs"]
    url = urlsplit(webhook["url"])
    assert url.hostname == "actuator"
    assert url.port == listen_port(compose, "actuator") == PORTS["actuator"]
    assert url.path == "/api/v1/alerts"
    # The token file Alertmanager sends is the one the actuator checks.
    credentials = webhook["http_config"]["authorization"]["credentials_file"]
    am_side = host_path(am, posixpath.join(posixpath.dirname(config_in_container), credentials))
    actuator = service(compose, "actuator")
    token_file = flag(actuator["command"], "--token-file")
    (secret,) = [s for s in actuator["secrets"] if token_file == f"/run/secrets/{s}"]
    assert compose["secrets"][secret]["file"] == am_side == "./deploy/secrets/actuator-token"


# --- ports --------------------------------------------------------------------------------------


def _doc_ports() -> dict[str, int]:
    """`| exporter (...) | 9838 |` rows of docs/deployment.md's table."""
    rows = re.findall(r"^\| (\w+)[^|]*\| (\d+) \|", doc_text(), flags=re.MULTILINE)
    return {name.lower(): int(port) for name, port in rows}


def _readme_ports() -> dict[str, int]:
    """`gpu-reclaimer COMMAND ... | ... (default `:PORT`)` rows of the README's command table."""
    rows = re.findall(
        r"^\| `gpu-reclaimer (\w+)[^|]*\|[^|]*default `:(\d+)`",
        (REPO / "README.md").read_text(),
        flags=re.MULTILINE,
    )
    return {name: int(port) for name, port in rows}


def test_ports_are_published_on_loopback_only_and_grafana_has_no_default_password(
    compose: dict[str, Any],
) -> None:
    for name, svc in compose["services"].items():
        for entry in svc.get("ports", []):
            assert str(entry).startswith("127.0.0.1:"), (name, entry)
    grafana = service(compose, "grafana")
    env = grafana.get("environment", {})
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/grafana-admin-password"


def test_ports_agree_with_the_readme_and_the_docs(compose: dict[str, Any]) -> None:
    readme, doc = _readme_ports(), _doc_ports()
    assert readme, "README command table not found"
    for name, port in PORTS.items():
        assert doc[name] == port
        if name in readme:
            assert readme[name] == port
        if name in compose["services"]:
            assert listen_port(compose, name) == port
            assert published(service(compose, name)) == {port: port}
    for name in ("prometheus", "alertmanager", "grafana"):
        port = listen_port(compose, name)
        assert doc[name] == port
        assert published(service(compose, name)) == {port: port}
    exposed = re.search(r"^EXPOSE (.+)$", DOCKERFILE.read_text(), flags=re.MULTILINE)
    assert exposed and {int(p) for p in exposed.group(1).split()} == set(PORTS.values())


# --- the image and the two services that run it ------------------------------------------------


def test_dockerfile_builds_the_package_and_runs_gpu_reclaimer() -> None:
    text = DOCKERFILE.read_text()
    # The official Python image by default; a local stand-in only when asked by name.
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, flags=re.MULTILINE)
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", text, flags=re.MULTILINE)
    (entrypoint,) = re.findall(r"^ENTRYPOINT (.+)$", text, flags=re.MULTILINE)
    assert yaml.safe_load(entrypoint) == ["gpu-reclaimer"]
    (cmd,) = re.findall(r"^CMD (.+)$", text, flags=re.MULTILINE)
    build_parser([]).parse_args(yaml.safe_load(cmd))  # a valid default command
    assert re.search(r"pip install ['\"]?\.", text)
    # Everything the build needs is copied, and not excluded by .dockerignore.
    copied = {
        src
        for line in re.findall(r"^COPY (.+)$", text, flags=re.MULTILINE)
        for src in line.split()[:-1]
    }
    pyproject = (REPO / "pyproject.toml").read_text()
    readme = re.search(r'^readme = "(.+)"', pyproject, flags=re.MULTILINE)
    include = re.search(r"^include = \[(.+)\]", pyproject, flags=re.MULTILINE)
    assert readme and include
    packages = {p.strip().strip('"').rstrip("*") for p in include.group(1).split(",")}
    assert {"pyproject.toml", readme.group(1), *packages} <= copied
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert not copied & ignored
    assert "deploy" in ignored  # secrets never enter the build context


def test_exporter_and_actuator_run_the_one_image(compose: dict[str, Any]) -> None:
    exporter, actuator = service(compose, "exporter"), service(compose, "actuator")
    assert exporter["build"] == actuator["build"] == "."
    assert exporter["image"] == actuator["image"]
    parser = build_parser([])
    for name, svc in (("exporter", exporter), ("actuator", actuator)):
        assert svc["command"][0] == name
        args = parser.parse_args(svc["command"])  # the real CLI accepts the command line
        assert args.command == name
        assert svc["pid"] == "host"
        (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    # One node name: the alerts' `node` (exporter) is the actuator's node.name (hostname).
    assert flag(exporter["command"], "--node-name") == exporter["hostname"]
    assert actuator["hostname"] == exporter["hostname"]


def test_exporter_reads_the_host_heartbeat_directory(compose: dict[str, Any]) -> None:
    exporter = service(compose, "exporter")
    assert flag(exporter["command"], "--heartbeat-dir") == HEARTBEAT_DIR
    assert (HEARTBEAT_DIR, HEARTBEAT_DIR, "ro") in mounts(exporter)
    tmpfiles = (REPO / "deploy" / "systemd" / "gpu-reclaimer-heartbeats.conf").read_text()
    assert re.search(rf"^d {re.escape(HEARTBEAT_DIR)} 1777 ", tmpfiles, flags=re.MULTILINE)


def test_actuator_config_storage_and_capabilities(compose: dict[str, Any], tmp_path: Path) -> None:
    actuator = service(compose, "actuator")
    assert "KILL" in actuator["cap_add"]
    config_in_container = flag(actuator["command"], "--config")
    assert host_path(actuator, config_in_container) == "./deploy/actuator.yml"
    config = yaml.safe_load((REPO / "deploy" / "actuator.yml").read_text())
    declared = set(compose["volumes"])
    for key in ("database", "audit_log"):
        source = host_path(actuator, config["storage"][key])
        assert source.split("/")[0] in declared, f"storage.{key} must be on a named volume"
    # The mounted config is valid (the actuator refuses to start otherwise).
    token = tmp_path / "token"
    token.write_text("x" * 32 + "\n")
    token.chmod(0o600)
    command = [
        *gpu_reclaimer_command(),
        "actuator",
        "--config",
        str(REPO / "deploy/actuator.yml"),
        "--token-file",
        str(token),
        "--check-config",
    ]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# --- Grafana ------------------------------------------------------------------------------------


def test_grafana_provisioning_matches_the_mounts(compose: dict[str, Any]) -> None:
    grafana = service(compose, "grafana")
    assert host_path(grafana, "/etc/grafana/provisioning") == "./grafana/provisioning"
    provisioning = REPO / "grafana" / "provisioning"
    (provider,) = yaml.safe_load((provisioning / "dashboards/gpu-reclaimer.yml").read_text())[
        "providers"
    ]
    dashboards = repo_file(host_path(grafana, provider["options"]["path"]))
    assert dashboards == REPO / "grafana" / "dashboards"
    assert sorted(p.name for p in dashboards.glob("*.json")) == [
        "gpu-reclaimer-actuator.json",
        "gpu-reclaimer-fleet.json",
    ]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert repo_file(host_path(grafana, home)).is_file()
    sources = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())
    for source in sources["datasources"]:
        url = urlsplit(source["url"])
        assert url.hostname in compose["services"], source["url"]
        assert url.port == listen_port(compose, str(url.hostname))


# --- systemd units ------------------------------------------------------------------------------


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((REPO / "deploy" / "systemd" / name).read_text())
    return parser


def test_systemd_units_run_gpu_reclaimer_on_the_reference_ports_and_paths() -> None:
    parser = build_parser([])
    exporter = _unit("gpu-reclaimer-exporter.service")["Service"]
    argv = exporter["ExecStart"].split()
    assert argv[0].endswith("/gpu-reclaimer")
    args = parser.parse_args(argv[1:])
    assert args.command == "exporter"
    assert int(flag(argv, "--listen").rsplit(":", 1)[1]) == PORTS["exporter"]
    assert flag(argv, "--heartbeat-dir") == HEARTBEAT_DIR

    actuator = _unit("gpu-reclaimer-actuator.service")["Service"]
    argv = actuator["ExecStart"].split()
    assert argv[0].endswith("/gpu-reclaimer")
    assert parser.parse_args(argv[1:]).command == "actuator"
    assert "CAP_KILL" in actuator["AmbientCapabilities"].split()
    # StateDirectory / LogsDirectory are the reference config's storage directories.
    storage = yaml.safe_load((REPO / "deploy" / "actuator.yml").read_text())["storage"]
    assert posixpath.dirname(storage["database"]) == "/var/lib/" + actuator["StateDirectory"]
    assert posixpath.dirname(storage["audit_log"]) == "/var/log/" + actuator["LogsDirectory"]
    # The default token_file of the reference config is the credential the unit loads.
    token_file = yaml.safe_load((REPO / "deploy" / "actuator.yml").read_text())["server"][
        "token_file"
    ]
    assert actuator["LoadCredential"] == f"token:{token_file}"


UNITS = (
    "gpu-reclaimer-exporter.service",
    "gpu-reclaimer-agent.service",
    "gpu-reclaimer-actuator.service",
)


def test_systemd_verifies_the_units(tmp_path: Path) -> None:
    """`systemd-analyze verify` with the command pointed at this checkout's gpu-reclaimer
    (it checks that the executable exists)."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze not found (Debian's systemd package)"
    here = shutil.which("gpu-reclaimer", path=str(Path(sys.executable).parent))
    assert here
    for name in UNITS:
        text = (REPO / "deploy" / "systemd" / name).read_text()
        (tmp_path / name).write_text(text.replace("/opt/gpu-reclaimer/bin/gpu-reclaimer", here))
    done = subprocess.run(
        [analyze, "verify", "--man=no", *(str(tmp_path / n) for n in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _writable(unit: configparser.SectionProxy) -> list[str]:
    """Where a ProtectSystem=strict unit may write."""
    out = unit.get("ReadWritePaths", "").split()
    out += ["/var/lib/" + d for d in unit.get("StateDirectory", "").split()]
    out += ["/var/log/" + d for d in unit.get("LogsDirectory", "").split()]
    out += ["/run/" + d for d in unit.get("RuntimeDirectory", "").split()]
    return out


def test_every_path_a_unit_writes_is_writable_under_its_settings() -> None:
    """Each part records itself in /run/gpu-reclaimer/self (root-owned: only root's records
    are trusted), the actuator writes its database, audit log and keep socket, the agent its
    journal: each under the unit's writable paths, as a user that may write there."""
    tmpfiles = (REPO / "deploy" / "systemd" / "gpu-reclaimer-heartbeats.conf").read_text()
    assert re.search(r"^d /run/gpu-reclaimer/self 0755 root root", tmpfiles, re.MULTILINE)
    actuator_yml = yaml.safe_load((REPO / "deploy" / "actuator.yml").read_text())
    agent_yml = yaml.safe_load((REPO / "deploy" / "agent.yml").read_text())
    from actuator.tools.keep_cli import DEFAULT_SOCKET
    from exporter.ownprocs import DEFAULT_RUNTIME_DIR

    writes = {
        "gpu-reclaimer-exporter.service": [f"{DEFAULT_RUNTIME_DIR}/self/x"],
        "gpu-reclaimer-agent.service": [f"{DEFAULT_RUNTIME_DIR}/self/x", agent_yml["journal"]],
        "gpu-reclaimer-actuator.service": [
            f"{DEFAULT_RUNTIME_DIR}/self/x",
            actuator_yml["storage"]["database"],
            actuator_yml["storage"]["audit_log"],
            DEFAULT_SOCKET,
        ],
    }
    for name, paths in writes.items():
        unit = _unit(name)["Service"]
        assert unit.get("ProtectSystem") == "strict", name
        assert unit.get("User", "root") == "root" and "DynamicUser" not in unit, name
        allowed = _writable(unit)
        for path in paths:
            assert any(path.startswith(d.rstrip("/") + "/") for d in allowed), (name, path)


def _compose_config(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), "--project-directory", str(REPO), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_the_file_is_valid_for_compose_1_and_2() -> None:
    done = _compose_config([require_binary("docker-compose")])
    assert done.returncode == 0, done.stderr
    plugin = (
        subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, check=False
        )
        if shutil.which("docker")
        else None
    )
    if plugin is not None and plugin.returncode == 0:
        done = _compose_config(["docker", "compose"])
        assert done.returncode == 0, done.stderr
    # Top-level keys both versions know (Compose 1 refuses `name:`).
    top = set(yaml.safe_load(COMPOSE_FILE.read_text()))
    assert {k for k in top if not k.startswith("x-")} <= {
        "services",
        "volumes",
        "networks",
        "secrets",
        "configs",
    }
    assert "COMPOSE_PROJECT_NAME=gpu-reclaimer" in (REPO / ".env").read_text()


def test_make_secrets_writes_a_token_both_alertmanager_and_the_actuator_accept(
    tmp_path: Path,
) -> None:
    """Found by the real run (make compose-test): Alertmanager's container runs as nobody
    and must read the token it sends; the actuator refuses one that group or others can
    read. Owned by 65534, mode 0600: both (the actuator is root)."""
    subprocess.run(
        ["make", "-s", "-f", str(REPO / "Makefile"), "-C", str(tmp_path), "secrets", "SUDO="],
        check=True,
        capture_output=True,
        timeout=60,
    )
    token = tmp_path / "deploy" / "secrets" / "actuator-token"
    info = token.stat()
    assert (info.st_uid, info.st_gid) == (65534, 65534)
    assert stat.S_IMODE(info.st_mode) == 0o600
    password = tmp_path / "deploy" / "secrets" / "grafana-admin-password"
    assert stat.S_IMODE(password.stat().st_mode) == 0o600 and password.stat().st_uid == 0
