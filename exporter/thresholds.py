"""The idle thresholds both sides judge by: the alert rules flag with them and the
actuator's live re-check confirms with them, so the two can never disagree.

The rules file is the one place an operator tunes them (its `TUNE` lines). The actuator
reads the same file (`idle.rules_file`); without one it uses `SHIPPED`, the values of the
shipped rules file, which tests/test_thresholds.py keeps equal to that file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Thresholds:
    # A process whose SM utilisation stays at or below this ratio does no GPU work.
    max_sm_util: float = 0.05
    # A process tree using more CPU cores than this is still working (dataloader, saving).
    max_cpu_cores: float = 0.1
    # GPU memory growing by more than this is a process loading a model, not an idle one.
    max_memory_growth_bytes: int = 64 * 2**20
    # The rules' sample window (`[1m]`), as PromQL writes it: evidence pictures use it.
    sample_window: str = "1m"


SHIPPED = Thresholds()

_NUMBER = r"([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
_IN_IDLE_CONDITION = {
    "max_sm_util": re.compile(rf"gpu_process:sm_utilization_ratio:max_window\s*<=\s*{_NUMBER}"),
    "max_cpu_cores": re.compile(rf"gpu_process:cpu_usage_cores:rate_window\s*<=\s*{_NUMBER}"),
    "max_memory_growth_bytes": re.compile(
        rf"gpu_process:memory_growth_bytes:window\s*<=\s*{_NUMBER}"
    ),
}


# The window of the per-process SM reading, the one every other [range] of the rules matches.
_SAMPLE_WINDOW = re.compile(
    r"max_over_time\(gpu_process_sm_utilization_ratio\[((?:\d+(?:ms|[smhdwy]))+)\]\)"
)


class ThresholdsError(ValueError):
    """The rules file does not state a threshold where the actuator looks for it."""


def from_rules(text: str, source: str = "rules") -> Thresholds:
    """The thresholds in the `gpu_process:quiet_condition` rule of a rules file's text (the
    condition GpuProcessIdle and GpuServiceIdle share; `idle_condition` in older files)."""
    values: dict[str, float] = {}
    for name, pattern in _IN_IDLE_CONDITION.items():
        found = pattern.findall(text)
        if len(set(found)) != 1:
            raise ThresholdsError(
                f"{source}: expected one value for {name} ({pattern.pattern.split(chr(92))[0]}"
                f" <= N) in gpu_process:quiet_condition, found {found or 'none'}"
            )
        values[name] = float(found[0])
    windows = set(_SAMPLE_WINDOW.findall(text))
    if len(windows) != 1:
        raise ThresholdsError(
            f"{source}: expected one window in gpu_process:sm_utilization_ratio:max_window "
            f"(max_over_time(gpu_process_sm_utilization_ratio[W])), "
            f"found {sorted(windows) or 'none'}"
        )
    return Thresholds(
        sample_window=windows.pop(),
        max_sm_util=values["max_sm_util"],
        max_cpu_cores=values["max_cpu_cores"],
        max_memory_growth_bytes=int(values["max_memory_growth_bytes"]),
    )


def load(path: str | Path) -> Thresholds:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ThresholdsError(f"{path}: cannot read rules file: {exc.strerror or exc}") from None
    return from_rules(text, str(path))
