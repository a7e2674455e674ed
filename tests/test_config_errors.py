"""Every settings file the project reads reports errors one way: file, count, key path,
list items counted from 1 and named (exporter/config_errors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actuator.config import ConfigError as ActuatorConfigError
from actuator.config import load_config as load_actuator_config
from exporter.config import ConfigError as ExporterConfigError
from exporter.config import load_config as load_exporter_config
from exporter.identity import ProjectMapping, ProjectMappingError


def _message(loader, error_type, path: Path) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(error_type) as caught:
        loader(path)
    return str(caught.value)


def test_the_three_files_share_one_format_and_one_numbering(tmp_path: Path) -> None:
    exporter = tmp_path / "exporter.yml"
    exporter.write_text("listen: ':9838'\nnvml_timeout_seconds: fast\n")
    mapping = tmp_path / "projects.yml"
    mapping.write_text("projects:\n  - {name: a, users: [x]}\n  - {name: b, userz: [y]}\n")
    actuator = tmp_path / "actuator.yml"
    actuator.write_text(
        "projects:\n  - {name: a, match: {users: [x]}}\n  - {name: b, match: {users: [y]}, "
        "grase: 5m}\n"
    )
    got = [
        _message(load_exporter_config, ExporterConfigError, exporter),
        _message(ProjectMapping.load, ProjectMappingError, mapping),
        _message(load_actuator_config, ActuatorConfigError, actuator),
    ]
    assert got[0] == (
        f"{exporter}: invalid config (1 error(s)):\n"
        "  nvml_timeout_seconds: invalid duration 'fast': use forms like 30s, 5m, "
        "1h30m, 7d, 1w"
    )
    assert got[1] == (
        f"{mapping}: invalid project mapping (1 error(s)):\n"
        "  projects #2 (b).userz: not a known key here (a typo, or a key of another section?)"
    )
    assert got[2] == (
        f"{actuator}: invalid config (1 error(s)):\n"
        "  projects #2 (b).grase: not a known key here (a typo, or a key of another section?)"
    )
