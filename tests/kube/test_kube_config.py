"""The `kubernetes:` settings: mistakes are clear errors at start, never a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from tests.support import gpu_reclaimer_command


def _check(tmp_path: Path, kubernetes: dict[str, object]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "actuator.yml"
    config.write_text(yaml.safe_dump({"kubernetes": kubernetes}))
    env = {**os.environ, "GPU_RECLAIMER_TOKEN": "0123456789abcdef0123"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run(
        [*gpu_reclaimer_command(), "actuator", "--config", str(config), "--check-config"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_an_unusable_kubeconfig_is_named_at_start(tmp_path: Path) -> None:
    done = _check(tmp_path, {"kubeconfig": str(tmp_path / "absent")})
    assert done.returncode == 2
    assert f"kubernetes: cannot use {tmp_path / 'absent'}" in done.stderr
    assert "Traceback" not in done.stderr
    outside = _check(tmp_path, {})  # no kubeconfig, not in a cluster
    assert outside.returncode == 2 and "the in-cluster service account" in outside.stderr


def test_a_wrong_action_names_the_key_and_the_choices(tmp_path: Path) -> None:
    done = _check(tmp_path, {"action": "nuke"})
    assert done.returncode == 2 and "kubernetes.action" in done.stderr
    assert "evict" in done.stderr and "Traceback" not in done.stderr
