"""`gpu-reclaimer sim ...` as a user types it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from exporter.sim.state import load_faults, load_node
from tests.support import GiB, gpu_reclaimer_command


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*gpu_reclaimer_command(), "sim", *args], capture_output=True, text=True, timeout=60
    )


def test_init_fault_and_status(tmp_path: Path) -> None:
    node = tmp_path / "node"
    assert sim("init", str(node), "--gpus", "4", "--memory", "40GiB").returncode == 0
    gpus = load_node(node).gpus
    assert [g.index for g in gpus] == [0, 1, 2, 3] and gpus[0].memory_total == 40 * GiB
    assert len({g.uuid for g in gpus}) == 4
    result = sim("fault", str(node), "--lose-gpu", "2", "--no-process-util", "1",
                 "--ghost", "0:4000000:1GiB", "--hang", "nvmlDeviceGetCount",
                 "--hang-seconds", "5", "--nvml-missing", "on", "--leak", "on")  # fmt: skip
    assert result.returncode == 0, result.stderr
    faults = load_faults(node)
    assert faults.lost_gpus == (2,) and faults.process_util_unsupported == (1,)
    assert faults.ghost_pids == ((0, 4_000_000, GiB),) and faults.nvml_missing
    assert faults.hang_call == "nvmlDeviceGetCount" and faults.hang_seconds == 5
    assert load_node(node).leak_on_exit
    assert sim("fault", str(node), "--restore-gpu", "2").returncode == 0
    assert load_faults(node).lost_gpus == ()
    assert sim("fault", str(node), "--clear").returncode == 0
    assert load_faults(node).nvml_missing is False
    status = sim("status", str(node))
    assert status.returncode == 0 and "GPU 3" in status.stdout


def test_clear_errors_for_bad_input(tmp_path: Path) -> None:
    missing = sim("run", "--dir", str(tmp_path / "nope"), "--gpu", "0", "--memory", "1GiB",
                  "--phases", "idle")  # fmt: skip
    assert missing.returncode != 0 and "sim init" in missing.stderr
    node = tmp_path / "node"
    sim("init", str(node), "--gpus", "1")
    bad_gpu = sim("run", "--dir", str(node), "--gpu", "3", "--memory", "1GiB", "--phases", "idle")
    assert bad_gpu.returncode != 0 and "GPUs 0..0" in bad_gpu.stderr
    bad_phase = sim("run", "--dir", str(node), "--gpu", "0", "--memory", "1GiB",
                    "--phases", "nap=1s,idle")  # fmt: skip
    assert bad_phase.returncode != 0 and "unknown phase" in bad_phase.stderr
    bad_size = sim("run", "--dir", str(node), "--gpu", "0", "--memory", "lots",
                   "--phases", "idle")  # fmt: skip
    assert bad_size.returncode != 0 and "invalid size" in bad_size.stderr
