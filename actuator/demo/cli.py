"""`gpu-reclaimer demo`: the whole stack on this machine, a small cast of simulated jobs, and a
live view of what each part sees and does. `--check` runs the same without the view and
exits 0 only when every job reached its expected outcome."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from exporter import argtypes

if TYPE_CHECKING:  # the stack and its parts load only when the demo runs
    from actuator.demo.cast import Role, Verdict
    from actuator.demo.observe import Snapshot
    from actuator.demo.stack import Stack, Workload
    from actuator.demo.view import Style

REFRESH_SECONDS = 1.0
NEVER = "never"  # --noticed-within never: abandoned jobs are never ended by their owners


def _scale(text: str) -> float:
    try:
        value = float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a number or fraction: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError("the scale must be in (0, 1], e.g. 1/15")
    return value


def _hours_or_never(text: str) -> float | str:
    if text.strip().lower() == NEVER:
        return NEVER
    hours = argtypes.positive_number(text)
    if hours < 0.5:
        raise argparse.ArgumentTypeError(f"at least half an hour, or never: {text!r}")
    return hours


def add_demo_command(commands: Any) -> None:
    parser = commands.add_parser(
        "demo",
        help="run the whole stack on this machine with simulated GPUs",
        description="Start a simulated 2-GPU node, the exporter, Prometheus, Alertmanager and "
        "the actuator (enforce mode) on loopback, with the reference configs and rules "
        "compressed in time; launch a small cast of simulated jobs and show live what each "
        "part sees and does. Ctrl-C stops everything it started.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="no live view: exit 0 when every job reached its expected outcome, else 1",
    )
    parser.add_argument(
        "--timeout",
        type=argtypes.duration,
        default=240.0,
        help="how long to wait for the outcomes (e.g. 240, 4m; default 4m)",
    )
    parser.add_argument(
        "--workdir", type=Path, help="where the run directory goes (default: the temp dir)"
    )
    parser.add_argument(
        "--scale", type=_scale, help="time scale of every window (default 1/15; --day: 1/120)"
    )
    parser.add_argument(
        "--grace", type=argtypes.duration, default=15.0, help="notice -> SIGTERM (default 15s)"
    )
    parser.add_argument(
        "--term-timeout",
        type=argtypes.duration,
        default=5.0,
        help="SIGTERM -> SIGKILL (default 5s)",
    )
    day = parser.add_argument_group(
        "a measured simulated day",
        "--day: a seeded day of jobs (trainings, debug runs, sessions paused while their owner "
        "is away, abandoned notebooks, crashed jobs with live workers, hung 2-GPU runs) "
        "queued on the node's wait list, run once per mode (observe; enforce with "
        "reclaim_when: idle; with reclaim_when: demand; with the suspend rung; with the "
        "owner's presence holding a reclaim; with both), then one table (utilisation, jobs "
        "per GPU, its ceiling, queue wait, reclaims, needless reclaims, work lost). 24 h at "
        "1/120 take about 12 minutes a mode.",
    )
    day.add_argument("--day", action="store_true", help="run the simulated day")
    day.add_argument("--hours", type=float, default=24.0, help="length of the day (default 24)")
    day.add_argument(
        "--seed",
        type=_seeds,
        default=(1,),
        metavar="N[,N...]",
        help="the job mix's seed (default 1); several, comma-separated, run the day once per "
        "seed and end with a table of each mode's means over them",
    )
    day.add_argument(
        "--gpus",
        type=argtypes.positive_int,
        default=4,
        help="GPUs on the simulated node (default 4)",
    )
    day.add_argument(
        "--jobs-per-gpu",
        type=argtypes.positive_number,
        default=None,
        metavar="N",
        help="jobs arriving per GPU per day, most in working hours (default 8: the queue is "
        "rarely empty in working hours; fewer: a cluster with room, where demand is rarer)",
    )
    day.add_argument(
        "--noticed-within",
        type=_hours_or_never,
        default=None,
        metavar="HOURS|never",
        help="an abandoned job's owner notices and ends it some time (drawn) between half an "
        "hour and this long after it stopped working (default 4); never: it holds its GPUs "
        "until reclaimed or the day ends",
    )
    day.add_argument(
        "--create-users",
        action="store_true",
        help="as root, create the day's job owners (system accounts day-alice, day-bob, "
        "day-lilei, day-wangfang in three projects) where missing; without them every job "
        "runs as you",
    )
    day.add_argument(
        "--modes",
        type=_modes,
        metavar="LIST",
        help="which runs, comma-separated (default all: observe,enforce,demand,suspend,"
        "presence,suspend-presence: observing, enforcing when idle, on demand, with the "
        "suspend rung, with the owner's presence holding a reclaim (needs the day's "
        "accounts, --create-users), with both)",
    )
    for service in ("exporter", "actuator", "prometheus", "alertmanager"):
        parser.add_argument(
            f"--{service}-port", type=int, metavar="PORT", help=f"{service} port (default: free)"
        )
    parser.set_defaults(func=run_demo)


def _seeds(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"seeds are whole numbers, comma-separated; not {text!r}")
    return tuple(dict.fromkeys(int(p) for p in parts))


def _modes(text: str) -> tuple[str, ...]:
    from actuator.demo.day import MODES

    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(f"modes are {', '.join(MODES)}; not {text!r}")
    return modes


class _Stop(Exception):
    """SIGTERM/SIGHUP: unwind like Ctrl-C so every started process is stopped."""


# Set by every stop signal. The exception a handler raises can be swallowed when the signal
# lands in a finaliser ("Exception ignored in ..."); the loops check this between steps, so
# a stop is never lost.
_STOPPING = threading.Event()


def _raise_stop(signum: int, frame: object) -> None:
    _STOPPING.set()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise _Stop


def _pause(seconds: float) -> None:
    """Sleep between redraws; raise _Stop once a stop signal came, even a swallowed one."""
    if _STOPPING.wait(seconds):
        raise _Stop


def run_demo(args: argparse.Namespace) -> int:
    from actuator.demo.cast import DEMO_CAST
    from actuator.demo.stack import Ports, Stack, StackError, StackOptions

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_stop)
    # Ctrl-C must stop everything, even where the parent started us with SIGINT ignored.
    signal.signal(signal.SIGINT, _raise_stop)
    if args.day:
        return _day(args)
    options = StackOptions(
        workdir=args.workdir,
        scale=args.scale or 1 / 15,
        grace=args.grace,
        term_timeout=args.term_timeout,
        ports=Ports(
            exporter=args.exporter_port,
            actuator=args.actuator_port,
            prometheus=args.prometheus_port,
            alertmanager=args.alertmanager_port,
        ),
    )
    out = sys.stdout
    try:
        with Stack(options) as stack:
            print(f"stack up: run directory {stack.run_dir}", file=out, flush=True)
            stack.wait_scraped()
            cast = [(role, role.spawn(stack)) for role in DEMO_CAST]
            if args.check:
                return _check(stack, cast, args.timeout, out)
            return _live(stack, cast, args.timeout, out)
    except StackError as exc:
        print(f"gpu-reclaimer demo: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, _Stop):
        # A clean stop is success: `make demo` must not end in "Error 130".
        print("\nstopped; every process the demo started is gone.", file=out)
        return 0


def _day(args: argparse.Namespace) -> int:
    from actuator.demo.accounts import day_accounts
    from actuator.demo.day import JOBS_PER_GPU, MODES, NOTICED_WITHIN_H, run_modes
    from actuator.demo.stack import StackError, StackOptions

    if args.hours <= 0:
        raise argtypes.CommandError("--hours must be positive")
    scale = args.scale or 1 / 120
    accounts = day_accounts(create_missing=args.create_users)
    options = StackOptions(
        users=accounts.users,
        workdir=args.workdir,
        scale=scale,
        gpus=args.gpus,
        grace=600 * scale,
        term_timeout=max(1.0, 10 * scale),
        label="day",
    )

    def progress(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    if accounts.note:
        progress(accounts.note)
    else:
        progress("jobs run as " + ", ".join(f"{u} ({p})" for u, p in accounts.users.items()))
    try:
        modes = args.modes or MODES
        jobs_per_gpu = args.jobs_per_gpu or JOBS_PER_GPU
        noticed_within_h: float | None = args.noticed_within
        if args.noticed_within is None:  # not given: the day's own
            noticed_within_h = NOTICED_WITHIN_H
        elif args.noticed_within == NEVER:
            noticed_within_h = None
        by_seed = run_modes(
            options,
            args.seed,
            args.hours,
            sys.stdout,
            progress,
            modes,
            jobs_per_gpu,
            noticed_within_h,
        )
        if len(by_seed) > 1:
            from actuator.demo.seeds import mean_table

            sys.stdout.write("\n" + mean_table(by_seed))
    except StackError as exc:
        print(f"gpu-reclaimer demo: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, _Stop):
        print("\nstopped; every process the demo started is gone.", file=sys.stderr)
        return 0
    return 0


def _verdicts(cast: Sequence[tuple[Role, Workload]], snap: Snapshot) -> list[Verdict]:
    from actuator.demo.cast import judge

    return [judge(role, workload, snap) for role, workload in cast]


def _finished(verdicts: Sequence[Verdict]) -> bool:
    return all(v.done for v in verdicts) or any(v.failed for v in verdicts)


def _differences(cast: Sequence[tuple[Role, Workload]], verdicts: Sequence[Verdict]) -> list[str]:
    rows = [f"  {'WORKLOAD':<20} {'EXPECTED':<10} {'GOT':<45} PROBLEM"]
    for (role, _), verdict in zip(cast, verdicts, strict=True):
        if not verdict.done or verdict.failed:
            problem = verdict.failed or "not reached in time"
            rows.append(f"  {role.label:<20} {role.expect!s:<10} {verdict.status:<45} {problem}")
    return rows


def _last_notice(stack: Stack) -> str:
    """The latest owner notice as the robot got it, with its keep link."""
    posts = [p.body for p in stack.sink.posts("/notice") if isinstance(p.body, dict)]
    if not posts:
        return "\nno owner notice was sent"
    content = str(posts[-1].get("markdown", {}).get("content", posts[-1]))
    return "\nthe last owner notice (WeCom markdown; open its keep link while the demo runs):\n" + (
        "\n".join("  " + line for line in content.splitlines())
    )


def _check(stack: Stack, cast: Sequence[tuple[Role, Workload]], timeout: float, out: TextIO) -> int:
    from actuator.demo.observe import Observer
    from actuator.demo.view import Style, render

    observer = Observer(stack)
    started = time.time()
    deadline = time.monotonic() + timeout
    seen: dict[str, str] = {}
    while True:
        snap = observer.snapshot()
        verdicts = _verdicts(cast, snap)
        for (role, _), verdict in zip(cast, verdicts, strict=True):
            if seen.get(role.label) != verdict.status:  # one line per change, for CI logs
                seen[role.label] = verdict.status
                print(
                    f"+{snap.at - started:5.1f}s  {role.label:<20} {verdict.status}",
                    file=out,
                    flush=True,
                )
        if _finished(verdicts) or time.monotonic() > deadline:
            break
        _pause(REFRESH_SECONDS)
    print(render(stack, cast, snap, verdicts, started=started, style=Style(False)), file=out)
    print(_last_notice(stack), file=out)
    if all(v.done and not v.failed for v in verdicts):
        print(f"\ndemo check passed in {time.time() - started:.0f}s", file=out)
        return 0
    print("\ndemo check FAILED; what differed:", file=out)
    print("\n".join(_differences(cast, verdicts)), file=out)
    print(f"logs: {stack.logs_dir}", file=out, flush=True)
    return 1


def _live(stack: Stack, cast: Sequence[tuple[Role, Workload]], timeout: float, out: TextIO) -> int:
    """Redraw until Ctrl-C; once the outcomes are in (or the time is up), say where to look."""
    from actuator.demo.observe import Observer
    from actuator.demo.view import CLEAR, HIDE_CURSOR, SHOW_CURSOR, Style, render

    observer = Observer(stack)
    style = Style(color=out.isatty())
    started = time.time()
    deadline = time.monotonic() + timeout
    footer: list[str] = []
    tty = out.isatty()
    last_printed: tuple[str, ...] = ()
    if tty:
        out.write(HIDE_CURSOR)
    try:
        while True:
            snap = observer.snapshot()
            verdicts = _verdicts(cast, snap)
            if footer or _finished(verdicts) or time.monotonic() > deadline:
                footer = _footer(stack, cast, verdicts, style)  # kept up to date from then on
            screen = render(
                stack, cast, snap, verdicts, started=started, style=style, footer=footer
            )
            if tty:
                out.write(CLEAR + screen + "\n")
            else:  # not a terminal (a pipe, a log): a plain snapshot whenever something changed
                key = (*(v.status for v in verdicts), *footer)
                if key != last_printed:
                    out.write(screen + "\n\n")
                    last_printed = key
            out.flush()
            _pause(REFRESH_SECONDS)
    finally:
        if tty:
            out.write(SHOW_CURSOR)
            out.flush()


def _footer(
    stack: Stack, cast: Sequence[tuple[Role, Workload]], verdicts: Sequence[Verdict], style: Style
) -> list[str]:
    if all(v.done and not v.failed for v in verdicts):
        head = style.green("Every job reached its expected outcome.")
    else:
        head = style.red("Some jobs did not reach their expected outcome:")
        head += "\n" + "\n".join(_differences(cast, verdicts))
    width = max(len(what) for what, _ in stack.where_to_look())
    lines = [head, "", style.bold("Where to look")]
    lines += [f"  {what:<{width}}  {where}" for what, where in stack.where_to_look()]
    lines += [
        f"  {'try':<{width}}  curl -H 'Authorization: Bearer {stack.token}' "
        f"{stack.url('actuator')}/api/v1/audit?limit=5",
        *_last_notice(stack).splitlines(),
        "",
        "Still running. Ctrl-C stops everything the demo started.",
    ]
    return lines
