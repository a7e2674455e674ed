"""Small, cheap readers of /proc facts that psutil does not expose directly."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def start_ticks(pid: int, proc_root: Path = PROC) -> int | None:
    """Process start time in clock ticks since boot (field 22 of stat); None if gone.

    Together with the PID it identifies a process across PID reuse.
    """
    stat = read_stat(pid, proc_root)
    return stat.start_ticks if stat is not None else None


def boot_time(proc_root: Path = PROC) -> float:
    for line in (proc_root / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise RuntimeError("no btime in /proc/stat")


@dataclass(frozen=True)
class ProcStat:
    """The few fields of /proc/<pid>/stat the exporter needs."""

    pid: int
    ppid: int
    start_ticks: int
    cpu_ticks: int  # utime + stime
    reaped_children_ticks: int  # cutime + cstime: children already waited for


def read_stat(pid: int, proc_root: Path = PROC) -> ProcStat | None:
    return _read_stat_at(f"{proc_root}/{pid}/stat", pid)


def _read_stat_at(path: str, pid: int) -> ProcStat | None:
    # Plain string paths and one read: this runs for every process on every scrape.
    try:
        with open(path, "rb", buffering=0) as handle:
            raw = handle.read(4096)
    except OSError:
        return None
    return _parse_stat(pid, raw)


def _parse_stat(pid: int, raw: bytes) -> ProcStat | None:
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return ProcStat(
            pid=pid,
            ppid=int(fields[1]),
            start_ticks=int(fields[19]),
            cpu_ticks=int(fields[11]) + int(fields[12]),
            reaped_children_ticks=int(fields[13]) + int(fields[14]),
        )
    except (IndexError, ValueError):
        return None


def read_process_table(proc_root: Path = PROC) -> dict[int, ProcStat]:
    """One pass over /proc: parent links and CPU ticks of every process.

    One read per process per scrape is cheaper than psutil's per-process tree walks.
    """
    table: dict[int, ProcStat] = {}
    root = str(proc_root)
    for name in os.listdir(root):
        if name.isdigit():
            stat = _read_stat_at(f"{root}/{name}/stat", int(name))
            if stat is not None:
                table[stat.pid] = stat
    return table


def children_map(table: dict[int, ProcStat]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat in table.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    return children


def tree_cpu_seconds(
    pid: int, table: dict[int, ProcStat], children: dict[int, list[int]]
) -> float | None:
    """CPU seconds of a process and all its descendants, live and reaped."""
    if pid not in table:
        return None
    total = 0
    stack, seen = [pid], set()
    while stack:
        current = stack.pop()
        if current in seen or current not in table:
            continue
        seen.add(current)
        stat = table[current]
        total += stat.cpu_ticks + stat.reaped_children_ticks
        stack.extend(children.get(current, ()))
    return total / CLOCK_TICKS
