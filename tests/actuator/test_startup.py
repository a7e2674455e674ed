"""Start-up checks that touch the outside: storage tried as the start writes it (and left as
it was), secrets and files readable, a token long enough and private, the rules'
thresholds and the templates where the config says; each problem a ConfigError that names
the setting."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from actuator.config import ActuatorConfig, ConfigError, config_warnings, load_config
from actuator.startup import (
    check_notifier,
    check_storage,
    check_tls,
    idle_thresholds,
    read_token,
)
from exporter.thresholds import SHIPPED
from tests.support import gpu_reclaimer_command


def check_config(tmp_path: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """`gpu-reclaimer actuator --check-config`, as an operator runs it."""
    token = tmp_path / "token"
    token.write_text("a-token-of-enough-bytes\n")
    token.chmod(0o600)
    return subprocess.run(
        [
            *gpu_reclaimer_command(),
            "actuator",
            "--config",
            str(config),
            "--token-file",
            str(token),
            "--check-config",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def load_config_text(tmp_path: Path, text: str) -> ActuatorConfig:
    path = tmp_path / "actuator.yml"
    path.write_text(text)
    return load_config(path)


def test_check_config_tries_the_storage_the_start_will_use(tmp_path: Path) -> None:
    """A path the old check passed (its nearest existing folder is writable) that the start
    cannot create; a limit of 0 under enforce is said, not silently deferred for ever."""
    too_long = tmp_path / ("x" * 300) / "actuator.db"
    config = load_config_text(tmp_path, f"storage: {{database: {too_long}}}\n")
    with pytest.raises(ConfigError, match=r"storage.database: .* cannot be written: .*too long"):
        check_storage(config)
    fine = load_config_text(
        tmp_path,
        f"storage: {{database: {tmp_path}/a/b/actuator.db, audit_log: {tmp_path}/a/audit.jsonl}}\n",
    )
    check_storage(fine)
    assert not (tmp_path / "a").exists()  # the check leaves nothing behind

    enforce = "mode: enforce\nnotice: {required: false}\nlimits: {terminations_per_minute: 0}\n"
    never = load_config_text(tmp_path, enforce)
    assert any("can never signal" in w for w in config_warnings(never))
    path = tmp_path / "never.yml"
    storage = f"storage: {{database: {tmp_path}/db, audit_log: {tmp_path}/audit}}\n"
    path.write_text(enforce + storage)
    result = check_config(tmp_path, path)
    assert "can never signal" in result.stdout + result.stderr, result


def test_check_config_refuses_an_unwritable_database(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = tmp_path / "actuator.yml"
    config.write_text(f"storage: {{database: {blocker}/sub/actuator.db}}\n")
    result = check_config(tmp_path, config)
    assert result.returncode == 2 and "storage.database" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_file_where_a_folder_should_be_is_named(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    config = load_config_text(tmp_path, f"storage: {{audit_log: {tmp_path}/plain/audit.jsonl}}\n")
    with pytest.raises(ConfigError, match=r"storage.audit_log: .*/plain/audit.jsonl"):
        check_storage(config)
    (tmp_path / "folder.db").mkdir()
    config = load_config_text(tmp_path, f"storage: {{database: {tmp_path}/folder.db}}\n")
    with pytest.raises(ConfigError, match="exists and is not a file"):
        check_storage(config)


def test_unreadable_tls_files_and_templates_are_named(tmp_path: Path) -> None:
    tls = f"server: {{tls: {{certfile: {tmp_path}/no.pem, keyfile: {tmp_path}/no.key}}}}\n"
    with pytest.raises(ConfigError, match=r"server.tls.certfile: .*no.pem is not readable"):
        check_tls(load_config_text(tmp_path, tls))
    templates = f"notifier: {{templates_dir: {tmp_path}/nowhere}}\n"
    with pytest.raises(ConfigError, match=r"notifier.templates_dir: .* is not a directory"):
        check_notifier(load_config_text(tmp_path, templates))


def test_the_thresholds_come_from_the_rules_file_else_the_shipped_rules(tmp_path: Path) -> None:
    assert idle_thresholds(load_config_text(tmp_path, "{}\n")) is SHIPPED
    (tmp_path / "broken.rules.yml").write_text("groups: [\n")
    broken = load_config_text(tmp_path, f"idle: {{rules_file: {tmp_path}/broken.rules.yml}}\n")
    with pytest.raises(ConfigError, match=r"idle\.rules_file"):
        idle_thresholds(broken)


def test_the_token_must_be_private_and_long_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config_text(tmp_path, "{}\n")
    token = tmp_path / "token"
    token.write_text("a-token-of-enough-bytes\n")
    token.chmod(0o640)
    with pytest.raises(ConfigError, match=r"readable by group or others .* chmod 600"):
        read_token(config, str(token))
    token.chmod(0o600)
    assert read_token(config, str(token)) == "a-token-of-enough-bytes"
    monkeypatch.setenv("GPU_RECLAIMER_TOKEN", "short")
    with pytest.raises(ConfigError, match=r"\$GPU_RECLAIMER_TOKEN: the token is 5 bytes"):
        read_token(config)
    monkeypatch.delenv("GPU_RECLAIMER_TOKEN")
    with pytest.raises(ConfigError, match="no API token"):
        read_token(config)


def test_the_documented_check_config_without_a_token_says_how_to_give_one(
    tmp_path: Path,
) -> None:
    """Issue 60: `gpu-reclaimer actuator --config deploy/actuator.yml --check-config` on a
    fresh box: one error line in every command's style, saying how to make the token."""
    missing = tmp_path / "no-such" / "token"
    config = tmp_path / "actuator.yml"
    config.write_text(f"server: {{token_file: {missing}}}\n")
    done = subprocess.run(
        [*gpu_reclaimer_command(), "actuator", "--config", str(config), "--check-config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("gpu-reclaimer actuator: error: "), done.stderr
    assert "Make one" in done.stderr and "--token-file" in done.stderr
    assert "ERROR" not in done.stderr and "Traceback" not in done.stderr


def test_check_config_says_its_warnings_as_the_command_not_as_log_lines(tmp_path: Path) -> None:
    """Issue 60: a warning of `--check-config` reads like every command's own message."""
    config = tmp_path / "actuator.yml"
    config.write_text(
        f"mode: enforce\ndefaults: {{grace: 15s}}\nstorage: {{database: {tmp_path / 'db'}, "
        f"audit_log: {tmp_path / 'audit.jsonl'}}}\nnotice: {{required: false}}\n"
    )
    done = check_config(tmp_path, config)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if line.strip()]
    assert warned and all(
        line.startswith(f"gpu-reclaimer actuator: warning: {config}: ") for line in warned
    ), done.stderr
    assert any("owners have almost no time to react" in line for line in warned)
    assert done.stdout.strip() == f"{config}: OK (mode enforce)"
