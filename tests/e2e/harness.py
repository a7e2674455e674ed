"""The scenarios of the end-to-end tests, run side by side on shared stacks.

`MainLoop`: one stack (node `e2e-node`) with every workload of the issue started at once;
each test then waits for its own outcome, so the suite costs one detection cycle, not ten.

`FaultRun`: a second, small stack (node `fault-node`) where one idle workload sits through
NVML failing and then the exporter being killed; a thread drives that timeline while the
main scenarios run, and the test checks afterwards, from Prometheus's TSDB and the actuator,
that nothing fired or was signalled until the exporter came back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actuator.demo.stack import Stack, StackOptions, Workload

SIGNALLED = {"terminating", "killing", "reclaimed", "failed"}
GRACE = 15.0  # notice -> SIGTERM
TERM_TIMEOUT = 5.0  # SIGTERM -> SIGKILL ("10 s or less for tests")
BUSY = 3.0  # every "goes idle" workload works this long first

# key -> (Stack.spawn options, expected outcome)
SCENARIOS: dict[str, tuple[dict[str, Any], str]] = {
    "idle_training": (
        {"name": "yolo", "phases": f"busy={BUSY:g}s,idle", "memory": "6GiB"},
        "reclaimed",
    ),
    "busy_training": (
        {"name": "yolo", "phases": "busy", "memory": "12GiB", "heartbeat": True},
        "untouched",
    ),
    # 24 GiB over 10 min grows ~150 MiB per 4 s window, above the 64 MiB "loading" threshold.
    "loading_model": (
        {"name": "train-llm", "phases": "load=10m,busy", "memory": "24GiB", "gpu": 1},
        "untouched",
    ),
    # GPU-idle but burning a CPU core; writes no log (a log that never moves would make it
    # look stalled, which is what a real stuck job with a dead log is).
    "dataloader_stall": (
        {
            "name": "train-dl",
            "phases": "idle",
            "cpu": True,
            "memory": "4GiB",
            "gpu": 1,
            "log": False,
        },
        "untouched",
    ),
    "tensorboard": (
        {"name": "tensorboard", "phases": "idle", "memory": "1GiB", "gpu": 1},
        "protected",
    ),
    "jupyter_server": (
        {"name": "jupyter-lab", "phases": "idle", "memory": "512MiB", "gpu": 1},
        "protected",
    ),
    "notebook_kernel": (
        {
            "module": "ipykernel_launcher",
            "phases": f"busy={BUSY:g}s,idle",
            "memory": "8GiB",
            "gpu": 1,
        },
        "reclaimed",
    ),
    # Idle until cued (CUES): it works again once its notice is out, inside the grace.
    "resumes_in_grace": (
        {"name": "yolo", "memory": "4GiB", "phases": f"busy={BUSY:g}s,idle=cue,busy"},
        "cancelled",
    ),
    "ignores_sigterm": (
        {
            "name": "train-ddp",
            "phases": f"busy={BUSY:g}s,idle",
            "memory": "10GiB",
            "ignore_sigterm": True,
        },
        "killed",
    ),
    "hung_nccl": (
        {
            "name": "train-ddp",
            "phases": f"busy={BUSY:g}s,hang",
            "memory": "16GiB",
            "heartbeat": True,
        },
        "stalled",
    ),
}

# key -> the case state whose arrival cues the workload into its next phase
CUES: dict[str, str] = {"resumes_in_grace": "notified"}


def read_audit(stack: Stack) -> list[dict[str, Any]]:
    try:
        lines = stack.audit_log.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def signalled_in_audit(stack: Stack, pid: int) -> list[str]:
    """Signals the audit log says were sent to `pid` (or decided for its case)."""
    found: list[str] = []
    for record in read_audit(stack):
        if record.get("event") == "signals":
            found += [
                f"{record['signal']}->{r['pid']}"
                for r in record.get("results", [])
                if r.get("pid") == pid and r.get("sent")
            ]
        elif record.get("pid") == pid and record.get("action") in ("sigterm", "sigkill"):
            found.append(f"decision {record['action']}")
    return found


def cases_for(stack: Stack, pid: int) -> list[dict[str, Any]]:
    """Every case for `pid`, newest first, each with its timeline and signals."""
    return [
        dict(stack.actuator_api(f"/api/v1/cases/{case['id']}"))
        for case in stack.actuator_api("/api/v1/cases", limit=1000)["cases"]
        if case["target"]["pid"] == pid
    ]


def case_for(stack: Stack, pid: int) -> dict[str, Any] | None:
    """The newest case for `pid`, with its timeline and signals."""
    cases = cases_for(stack, pid)
    return cases[0] if cases else None


def diagnose(stack: Stack, workload: Workload | None = None) -> str:
    """What to print when an end-to-end assertion fails."""
    parts = []
    if workload is not None:
        try:
            parts.append(f"case: {json.dumps(case_for(stack, workload.pid), indent=1)[:3000]}")
        except Exception as exc:  # the actuator may be the thing that broke
            parts.append(f"case: unavailable ({exc})")
        parts.append(f"workload log tail:\n{workload.managed.log_tail(10)}")
    try:
        alerts = stack.prometheus_api("/api/v1/alerts")["alerts"]
        parts.append(
            "alerts: "
            + ", ".join(
                f"{a['labels'].get('alertname')}/{a['labels'].get('pid', '-')}/{a['state']}"
                for a in alerts
            )
        )
    except Exception as exc:
        parts.append(f"alerts: unavailable ({exc})")
    for name, managed in stack.services.items():
        parts.append(f"--- {name} log tail:\n{managed.log_tail(15)}")
    return "\n".join(parts)


# Budgets per stage, each counted from the workload's own last observed event, so one slow
# case never spends another's time: the case opens within DETECT of the workload's start
# (busy 3 s + window and `for:` ~30 s at 1/15, with room for a loaded machine), and every
# later step (notice, SIGTERM, SIGKILL, the end) comes within STEP of the one before.
DETECT = 150.0
STEP = 60.0


def wait_case(
    stack: Stack,
    workload: Workload,
    states: set[str],
    *,
    detect: float = DETECT,
    step: float = STEP,
) -> dict[str, Any]:
    """Until the newest case for the workload is in one of `states`; fail with diagnostics.

    The deadline moves with the case: `detect` seconds from the workload's start for a case
    to open, then `step` seconds from each change of state seen. Another end while the
    process lives is not final: at 1 s scrapes a machine stall of a second fails a scrape,
    the rules resolve on the missing evidence (their fail-safe), and the next episode opens
    a new case.
    """
    deadline = time.monotonic() + max(1.0, workload.started + detect - time.time())
    case = None
    seen: tuple[str, str] | None = None
    while time.monotonic() < deadline:
        case = case_for(stack, workload.pid)
        if case is not None and case["state"] in states:
            return case
        if case is not None and case["state"] in {"reclaimed", "failed"}:
            break  # final, and not what we wanted
        if not workload.alive() and (case is None or case["state"] not in SIGNALLED):
            break  # gone by itself
        if case is not None and (case["id"], case["state"]) != seen:
            seen = (case["id"], case["state"])  # progress: the next step has its own time
            deadline = max(deadline, time.monotonic() + step)
        time.sleep(0.5)
    raise AssertionError(
        f"{workload.label}: case never reached {sorted(states)} (last: "
        f"{case and case['state']})\n{diagnose(stack, workload)}"
    )


@dataclass
class MainLoop:
    stack: Stack
    workloads: dict[str, Workload]
    cued: dict[str, float] = field(default_factory=dict)  # key -> when its cue was sent


def _reached(case: dict[str, Any], state: str) -> bool:
    """The case went through `state`; for "notified", its notice is out too (the state is
    committed before the notice is sent, and its time recorded once it was)."""
    if state not in [s["state"] for s in case["timeline"]]:
        return False
    return state != "notified" or case["notified_at"] is not None


def _cue_on_events(loop: MainLoop, stop: threading.Event) -> None:
    """Send each workload of CUES its cue (SIGUSR1: the next phase) once its case reaches the
    state named there: the workload's phase changes follow what the stack did, not a clock."""
    waiting = dict(CUES)
    while waiting and not stop.wait(0.3):
        for key, state in list(waiting.items()):
            workload = loop.workloads[key]
            try:
                case = case_for(loop.stack, workload.pid)
            except Exception:  # the actuator restarting: ask again next round
                continue
            if case is not None and _reached(case, state):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(workload.pid, signal.SIGUSR1)
                loop.cued[key] = time.time()
                del waiting[key]


@contextmanager
def main_loop(workdir: Path) -> Iterator[MainLoop]:
    options = StackOptions(
        workdir=workdir, node_name="e2e-node", grace=GRACE, term_timeout=TERM_TIMEOUT, label="e2e"
    )
    with Stack(options) as stack:
        stack.wait_scraped()
        workloads = {key: stack.spawn(key, **spawn) for key, (spawn, _) in SCENARIOS.items()}
        loop = MainLoop(stack, workloads)
        stop = threading.Event()
        cues = threading.Thread(target=_cue_on_events, args=(loop, stop), name="cues", daemon=True)
        cues.start()
        try:
            yield loop
        finally:
            stop.set()
            cues.join(timeout=10)


# -- faults ---------------------------------------------------------------------------------

FAULT_SECONDS = 25.0  # > window + for (4 s + 20 s): long enough to fire if it were counted


@dataclass
class FaultRun:
    """Timeline of the fault scenarios (unix times) and what was seen at each step."""

    stack: Stack
    workload: Workload | None = None
    marks: dict[str, float] = field(default_factory=dict)
    seen: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def _sleep_until(self, when: float) -> None:
        while not self.stop.is_set() and time.time() < when:
            self.stop.wait(min(0.2, max(0.0, when - time.time())))
        if self.stop.is_set():
            raise InterruptedError("fault run stopped")

    def _until(self, predicate: Callable[[], Any], timeout: float) -> Any:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                value = predicate()
            except Exception:
                value = None
            if value:
                return value
            self._sleep_until(min(deadline, time.time() + 0.3))
        return None

    def _pid_alert(self) -> str | None:
        assert self.workload is not None
        for alert in self.stack.prometheus_api("/api/v1/alerts")["alerts"]:
            if alert["labels"].get("pid") == str(self.workload.pid):
                return str(alert["state"])
        return None

    def _record(self, step: str) -> None:
        assert self.workload is not None
        self.seen[step] = {
            "alive": self.workload.alive(),
            "case": case_for(self.stack, self.workload.pid),
        }

    def run(self) -> None:
        try:
            stack = self.stack
            stack.start()  # here, so it starts while the main stack does
            stack.wait_scraped()
            self.workload = stack.spawn(
                "idle under faults", name="yolo", phases=f"busy={BUSY:g}s,idle", memory="6GiB"
            )
            idle_at = self.workload.started + BUSY
            # 1. NVML fails while the idle process's alert is pending.
            self.seen["pending_before_nvml"] = self._until(
                lambda: self._pid_alert() == "pending", 20
            )
            self._sleep_until(idle_at + 8)
            stack.fault("--nvml-missing", "on")
            self.marks["nvml_missing"] = time.time()
            self._sleep_until(self.marks["nvml_missing"] + FAULT_SECONDS)
            self._record("end_of_nvml_fault")
            stack.fault("--nvml-missing", "off")
            self.marks["nvml_back"] = time.time()
            # 2. The exporter is killed while the alert is pending again.
            self.seen["pending_before_kill"] = self._until(
                lambda: self._pid_alert() == "pending", 20
            )
            stack.kill_service("exporter")
            self.marks["exporter_killed"] = time.time()
            self._sleep_until(self.marks["exporter_killed"] + FAULT_SECONDS)
            self._record("end_of_exporter_down")
            stack.restart_service("exporter")
            self.marks["exporter_back"] = time.time()
            # 3. Healthy again: the loop must work, so the silence above was the gate's doing.
            self.seen["final"] = self._until(
                lambda: (
                    (c := case_for(stack, self.workload.pid))
                    and c["state"] in {"reclaimed", "failed"}
                    and c
                ),
                90,
            )
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()


@contextmanager
def fault_run(workdir: Path) -> Iterator[FaultRun]:
    options = StackOptions(
        workdir=workdir,
        node_name="fault-node",
        gpus=1,
        grace=2.0,
        term_timeout=TERM_TIMEOUT,
        workers=1,
        label="e2e-faults",
    )
    run = FaultRun(Stack(options))
    thread = threading.Thread(target=run.run, name="fault-run", daemon=True)
    thread.start()
    try:
        yield run
    finally:
        run.stop.set()
        thread.join(timeout=60)  # a start in progress finishes (or cleans up) first
        run.stack.stop()
