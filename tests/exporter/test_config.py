"""The exporter's settings file: defaults, durations read like flags, strict keys and
bounds named in the error, and listen addresses."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import (
    DEFAULT_HEARTBEAT_DIR,
    ConfigError,
    ExporterConfig,
    load_config,
    parse_listen,
)


def test_an_empty_file_is_every_default(tmp_path: Path) -> None:
    path = tmp_path / "exporter.yml"
    path.write_text("")
    config = load_config(path)
    assert config == ExporterConfig()
    assert config.listen == ":9838" and config.heartbeat_dir == DEFAULT_HEARTBEAT_DIR
    assert config.nvml_timeout_seconds == 1.5 and config.gzip_level == 1


def test_durations_read_as_flags_do(tmp_path: Path) -> None:
    path = tmp_path / "exporter.yml"
    path.write_text("nvml_timeout_seconds: 500ms\nnode_name: gpu-07\nlog_globs: ['/data/*.log']\n")
    config = load_config(path)
    assert config.nvml_timeout_seconds == 0.5
    assert config.node_name == "gpu-07" and config.log_globs == ["/data/*.log"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nvml_timeout: 1s\n", "nvml_timeout"),  # a misspelt key is refused, not ignored
        ("nvml_timeout_seconds: 5s\n", "nvml_timeout_seconds"),  # above the 1.5 s bound
        ("gzip_level: 0\n", "gzip_level"),
        ("- listen\n", "expected a mapping"),
        ("listen: [unclosed\n", "exporter.yml"),
    ],
)
def test_a_bad_file_is_named_with_the_key(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "exporter.yml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert says in str(error.value)


@pytest.mark.parametrize(
    ("listen", "address"),
    [
        (":9838", ("0.0.0.0", 9838)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9838", ("::1", 9838)),
        ("10.0.0.5", ("10.0.0.5", 9838)),
    ],
)
def test_listen_addresses(listen: str, address: tuple[str, int]) -> None:
    assert parse_listen(listen) == address


@pytest.mark.parametrize("listen", ["host:http", "host:70000", "host:-1"])
def test_a_bad_listen_address_says_how_to_write_one(listen: str) -> None:
    with pytest.raises(ConfigError, match=r"listen|port"):
        parse_listen(listen)
