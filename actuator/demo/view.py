"""The demo's screen: one table of what each part sees about each workload, plain ANSI."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from actuator.audit import Event
from actuator.demo.cast import Role, Verdict
from actuator.demo.observe import Snapshot
from actuator.demo.stack import Stack, Workload

GiB = 2**30
CLEAR = "\x1b[H\x1b[J"  # cursor home, clear to the end: redraw without scrolling
HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"


@dataclass(frozen=True)
class Style:
    color: bool

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GiB:.1f} GiB"


def _pad(text: str, width: int, styled: str | None = None) -> str:
    """Pad by the visible width (ANSI codes take no room on screen)."""
    text = text if len(text) <= width else text[: width - 1] + "…"
    return (styled if styled is not None else text) + " " * (width - len(text))


def _case_text(case: dict | None, stack: Stack, now: float) -> str:
    if case is None:
        return "-"
    state, cid = case["state"], case["id"]
    if state == "notified" and case.get("notified_at"):
        left = case["notified_at"] + stack.options.grace - now
        return f"#{cid} notified, SIGTERM in {max(left, 0):.0f}s"
    if state == "terminating" and case.get("term_at"):
        left = case["term_at"] + stack.options.term_timeout - now
        return f"#{cid} SIGTERM sent, SIGKILL in {max(left, 0):.0f}s"
    if state == "reclaimed":
        return f"#{cid} reclaimed, {_gib(case['freed_bytes'])} freed"
    if state in ("refused", "cancelled", "failed"):
        return f"#{cid} {state}: {case['reason_code'] or case['reason']}"
    return f"#{cid} {state}"


COLUMNS = (
    ("WORKLOAD", 19),
    ("COMMAND", 20),
    ("PID", 7),
    ("GPU", 4),
    ("HELD", 9),
    ("PROMETHEUS", 25),
    ("ACTUATOR", 35),
    ("SIGNALS", 15),
    ("EXPECTED", 10),
)


def render(
    stack: Stack,
    cast: Sequence[tuple[Role, Workload]],
    snap: Snapshot,
    verdicts: Sequence[Verdict],
    *,
    started: float,
    style: Style,
    footer: Sequence[str] = (),
) -> str:
    """The whole screen as text."""
    opts = stack.options
    scale = f"1/{1 / opts.scale:g}" if opts.scale < 1 else f"{opts.scale:g}"
    lines = [
        style.bold("GPU Reclaimer demo")
        + f" · node {opts.node_name} · {opts.gpus} simulated GPUs · enforce mode"
        f" · windows x{scale} (scrape {stack.interval:g}s, grace {opts.grace:g}s,"
        f" SIGKILL {opts.term_timeout:g}s after SIGTERM)   t+{snap.at - started:.0f}s",
        "",
        " ".join(_pad(name, width) for name, width in COLUMNS),
    ]
    for (role, workload), verdict in zip(cast, verdicts, strict=True):
        alert = snap.alert_for(workload.pid)
        alert_text = f"{alert[0]} {alert[1]}" if alert else "-"
        cases = snap.cases_for(workload.pid)
        signals = snap.signals_for(workload.pid)
        held = snap.process_memory.get(workload.pid)
        held_text = _gib(held) if held is not None else ("freed" if not workload.alive() else "-")
        if verdict.failed:
            mark, paint = f"✗ {role.expect}", style.red
        elif verdict.done:
            mark, paint = f"✓ {role.expect}", style.green
        else:
            mark, paint = f"… {role.expect}", style.yellow
        alert_style = style.red(alert_text) if alert and alert[1] == "firing" else None
        cells = [
            _pad(role.label, 19),
            _pad(workload.command, 20),
            _pad(str(workload.pid), 7),
            _pad(str(workload.gpu), 4),
            _pad(held_text, 9),
            _pad(alert_text, 25, alert_style),
            _pad(_case_text(cases[0] if cases else None, stack, snap.at), 35),
            _pad(",".join(signals) or "-", 15),
            paint(mark),
        ]
        lines.append(" ".join(cells))
    lines.append("")
    bars = []
    for gpu in snap.gpus:
        filled = round(20 * gpu.used / gpu.total) if gpu.total else 0
        bar = "#" * filled + "." * (20 - filled)
        bars.append(f"GPU {gpu.index} [{bar}] {gpu.used / GiB:5.1f} / {gpu.total / GiB:.0f} GiB")
    lines.append("   ".join(bars) if bars else style.dim("GPU memory: exporter not answering"))
    nvml = {True: "NVML up", False: style.red("NVML DOWN"), None: "NVML ?"}[snap.nvml_up]
    lines.append(
        f"exporter: {nvml} · Prometheus: {sum(a['state'] == 'firing' for a in snap.alerts)} "
        f"firing, {sum(a['state'] == 'pending' for a in snap.alerts)} pending · Alertmanager -> "
        f"chat relay: {snap.chat_posts} posts · actuator: {len(snap.cases)} cases, "
        f"{snap.notices} owner notices"
    )
    if snap.errors:
        lines.append(style.red("not answering: " + ", ".join(snap.errors)))
    lines += ["", style.bold("Recent decisions (audit log)")]
    labels = {w.pid: role.label for role, w in cast}
    for event in snap.events:
        lines.append(_event_line(event, labels, started))
    if footer:
        lines += ["", *footer]
    return "\n".join(lines)


def _event_line(event: dict, labels: dict[int, str], started: float) -> str:
    at = f"+{event.get('ts', started) - started:5.1f}s"
    case_id = f"#{event['case']} " if event.get("case") else ""
    who = f"{case_id}{labels.get(event.get('pid', -1), '')}".rstrip()
    if event.get("event") == Event.SIGNALS:
        sent = [r for r in event.get("results", []) if r.get("sent")]
        return f"  {at}  case #{event.get('case')}: sent {event.get('signal')} to " + (
            ", ".join(f"pid {r['pid']}" for r in sent) or "nothing"
        )
    moved = f"{event.get('from') or 'new'} -> {event.get('to')}"
    return f"  {at}  {_pad(who, 24)} {_pad(moved, 25)} {event.get('reason', '')}"[:160]
