"""Start-up checks that touch the outside, run once before the service starts (and by
`--check-config`): files and secrets readable, storage writable as the start will write it,
the database and the Kubernetes credentials usable, the rules' thresholds and the project
mapping readable. actuator/config.py is the schema only."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from actuator.config import ActuatorConfig, ConfigError, NodeConfig
from exporter.identity import ProjectMapping, ProjectMappingError
from exporter.thresholds import SHIPPED, Thresholds, ThresholdsError
from exporter.thresholds import load as load_thresholds

MIN_TOKEN_BYTES = 16


def _check_postgres(dsn: str) -> None:
    import psycopg

    from actuator.store.postgres import redacted

    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as exc:
        raise ConfigError(f"storage.database: cannot connect to {redacted(dsn)}: {exc}") from None


def check_storage(config: ActuatorConfig) -> None:
    """Raise ConfigError unless the database and the audit log can be created and written:
    tried as the start does it (missing folders made, a file written in the folder), then
    undone, so the check leaves nothing behind."""
    files = [("storage.audit_log", config.storage.audit_log)]
    if config.storage.database.startswith(("postgresql://", "postgres://")):
        _check_postgres(config.storage.database)
    else:
        files.insert(0, ("storage.database", config.storage.database))
    for key, name in files:
        problem = _try_writing(Path(name).absolute())
        if problem:
            raise ConfigError(f"{key}: {name} cannot be written: {problem}")


def _try_writing(path: Path) -> str:
    """Why `path` could not be created or appended to ("" when it can)."""
    made: list[Path] = []
    try:
        if path.exists() and not path.is_file():
            return "it exists and is not a file"
        for folder in reversed([p for p in path.parents if not p.exists()]):
            folder.mkdir()
            made.append(folder)
        if path.exists():
            with path.open("ab"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".check-"):
                pass
    except OSError as exc:
        return f"{exc.strerror or exc} ({exc.filename or path})"
    finally:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
    return ""


def idle_thresholds(config: ActuatorConfig) -> Thresholds:
    """The rules' thresholds: from idle.rules_file, else the shipped rules' values."""
    if config.idle.rules_file is None:
        return SHIPPED
    try:
        return load_thresholds(config.idle.rules_file)
    except ThresholdsError as exc:
        raise ConfigError(f"idle.rules_file: {exc}") from None


def check_tls(config: ActuatorConfig) -> None:
    tls = config.server.tls
    if tls is None:
        return
    for key, path in (("server.tls.certfile", tls.certfile), ("server.tls.keyfile", tls.keyfile)):
        if not os.access(path, os.R_OK):
            raise ConfigError(f"{key}: {path} is not readable")


def check_kubernetes(config: ActuatorConfig) -> None:
    """At start: the kubeconfig (or the pod's service account) loads. The API server itself
    may be away; cases wait (pod_blocked) until it answers."""
    settings = config.kubernetes
    if settings is None:
        return
    from actuator.schedulers.kube_api import KubeApi

    try:
        KubeApi.connect(settings.kubeconfig, settings.context, timeout=settings.timeout)
    except Exception as exc:  # the client's ConfigException, a missing file, bad YAML
        where = settings.kubeconfig or "the in-cluster service account"
        raise ConfigError(f"kubernetes: cannot use {where}: {exc}") from None


def check_notifier(config: ActuatorConfig) -> None:
    """At start, not at the first notice: the owner directory parses, secrets and the site's
    templates are readable."""
    from actuator.notifications.owners import DirectoryError, OwnerDirectory

    settings = config.notifier
    if settings.directory:
        try:
            OwnerDirectory.load(settings.directory)
        except DirectoryError as exc:
            raise ConfigError(f"notifier.directory: {exc}") from None
    files = {
        "notifier.email.password_file": settings.email and settings.email.password_file,
        "notifier.ldap.password_file": settings.ldap and settings.ldap.password_file,
    }
    for name in ("dingtalk", "feishu"):
        robot = getattr(settings, name)
        files[f"notifier.{name}.secret_file"] = robot and robot.secret_file
    for key, path in files.items():
        if path and not os.access(path, os.R_OK):
            raise ConfigError(f"{key}: {path} is not readable")
    if settings.templates_dir and not Path(settings.templates_dir).is_dir():
        raise ConfigError(f"notifier.templates_dir: {settings.templates_dir} is not a directory")
    if settings.evidence is not None:
        from actuator.evidence.chart import available

        missing = available()
        if missing:
            raise ConfigError(f"notifier.evidence: {missing}")


def load_projects(config: ActuatorConfig) -> ProjectMapping | None:
    """The exporter's project mapping (node.projects_file), or None."""
    return load_node_projects(config.node)


def load_node_projects(node: NodeConfig) -> ProjectMapping | None:
    if node.projects_file is None:
        return None
    try:
        return ProjectMapping.load(node.projects_file)
    except ProjectMappingError as exc:
        raise ConfigError(f"node.projects_file: {exc}") from None


def read_token(config: ActuatorConfig, token_file: str | None = None) -> str:
    """The bearer token: --token-file, then server.token_file, then $GPU_RECLAIMER_TOKEN."""
    file = token_file or config.server.token_file
    if file:
        try:
            with open(file, encoding="utf-8") as handle:
                mode = os.fstat(handle.fileno()).st_mode
                token = handle.read().strip()
        except OSError as exc:
            raise ConfigError(
                f"{file}: cannot read the API token file: {exc.strerror or exc}. Make one "
                f"(umask 077; python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > "
                f"{file}), or name another with --token-file FILE, or set $GPU_RECLAIMER_TOKEN"
            ) from None
        if mode & 0o077:
            raise ConfigError(
                f"{file}: token file is readable by group or others (mode {mode & 0o777:o}): "
                f"chmod 600 {file}"
            )
        source = file
    else:
        token = os.environ.get("GPU_RECLAIMER_TOKEN", "").strip()
        source = "$GPU_RECLAIMER_TOKEN"
    if not token:
        raise ConfigError(
            f"{source}: no API token: set server.token_file, --token-file or $GPU_RECLAIMER_TOKEN"
        )
    if len(token.encode()) < MIN_TOKEN_BYTES:
        raise ConfigError(
            f"{source}: the token is {len(token.encode())} bytes; use at least {MIN_TOKEN_BYTES} "
            "(make secrets writes a random one)"
        )
    return token
