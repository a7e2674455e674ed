"""The agent's settings: mutual TLS always (a missing or unreadable file named), strict keys,
and what it defaults to without a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from actuator.config import ConfigError
from actuator.fleet.agent_config import (
    DEFAULT_AGENT_PORT,
    AgentConfig,
    check_agent_tls,
    load_agent_config,
)


def _tls_files(tmp_path: Path) -> dict[str, str]:
    files = {}
    for key in ("certfile", "keyfile", "client_ca"):
        path = tmp_path / f"{key}.pem"
        path.write_text("-----BEGIN-----\n")
        files[key] = str(path)
    return files


def test_without_a_file_the_defaults_protect_root_and_listen_on_the_agent_port() -> None:
    config = load_agent_config(None)
    assert config.listen == f"0.0.0.0:{DEFAULT_AGENT_PORT}"
    assert config.protect.protect_root and config.tls is None


def test_the_agent_serves_mutual_tls_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mutual TLS only"):
        check_agent_tls(AgentConfig())
    files = _tls_files(tmp_path)
    config = AgentConfig.model_validate({"tls": files})
    assert check_agent_tls(config).client_ca == files["client_ca"]


def test_a_missing_tls_file_is_named(tmp_path: Path) -> None:
    files = {**_tls_files(tmp_path), "client_ca": str(tmp_path / "nowhere.pem")}
    with pytest.raises(ConfigError, match=r"tls\.client_ca: .*nowhere\.pem is not readable"):
        check_agent_tls(AgentConfig.model_validate({"tls": files}))


def test_a_config_file_with_an_unknown_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "agent.yml"
    path.write_text("listen: 127.0.0.1:9837\nthreads: 4\njournal_kept: 1d\n")
    with pytest.raises(ConfigError, match="journal_kept"):
        load_agent_config(path)
    path.write_text("listen: 127.0.0.1:9837\nthreads: 4\n")
    assert load_agent_config(path).threads == 4
