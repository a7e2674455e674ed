"""The simulated day over several seeds: one table of each mode's key figures, the mean of
the seeds first, then each seed's value, so one seed's luck is not read as the mode's
effect (`gpu-reclaimer demo --day --seed 1,2,3`). Pure: it reads the figures measured."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

from actuator.demo.day import MODE_NAMES, DayFigures

# (row, the figure or None where it does not apply, its unit)
ROWS: tuple[tuple[str, Callable[[DayFigures], float | None], str], ...] = (
    ("jobs completed per GPU per day", lambda f: f.jobs_per_gpu_day, ""),
    (
        "completion ceiling (every job started on arrival), per GPU per day",
        lambda f: f.ceiling_per_gpu_day,
        "",
    ),
    ("work lost (GPU-hours done, then killed)", lambda f: f.work_lost_gpu_h, " h"),
    ("killed sessions their owners started again", lambda f: f.redone, ""),
    ("processes suspended (checkpointed into host memory)", lambda f: f.suspended, ""),
    ("reclaims held while the owner was present", lambda f: f.held_present, ""),
    (
        "host memory held by checkpoints (peak)",
        lambda f: f.peak_host_gib if f.suspended else None,
        " GiB",
    ),
    ("mean queue wait (a job still waiting: until the end)", lambda f: f.mean_wait_all_h, " h"),
    ("GPU-hours held by idle or stalled processes", lambda f: f.idle_gpu_hours, " h"),
    ("processes reclaimed", lambda f: f.reclaimed, ""),
    ("working jobs signalled (must be 0)", lambda f: f.harmed, ""),
)


def _cell(values: Sequence[float | None], unit: str) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    each = ", ".join("-" if v is None else f"{v:g}" if v == int(v) else f"{v:.1f}" for v in values)
    return f"{statistics.fmean(known):.1f}{unit} ({each})"


def mean_table(by_seed: Mapping[int, Sequence[DayFigures]]) -> str:
    """Markdown: one column per mode (in the first seed's order), each cell the mean over
    the seeds and, in brackets, each seed's value in the seeds' order."""
    seeds = list(by_seed)
    modes: list[str] = []
    for runs in by_seed.values():
        modes += [f.mode for f in runs if f.mode not in modes]
    figures = {seed: {f.mode: f for f in runs} for seed, runs in by_seed.items()}
    lines = [
        f"Means over seeds {', '.join(str(s) for s in seeds)} (then each seed's value):",
        "",
        "| | " + " | ".join(MODE_NAMES.get(m, m) for m in modes) + " |",
        "|---" * (len(modes) + 1) + "|",
    ]
    for name, read, unit in ROWS:
        cells = []
        for mode in modes:
            ran = [figures[s][mode] for s in seeds if mode in figures[s]]
            cells.append(_cell([read(f) for f in ran], unit))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
