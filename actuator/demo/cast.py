"""The demo's workloads and what must happen to each, judged from what the parts report."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from actuator.demo.observe import EVER_SIGNALLED_STATES, Snapshot
from actuator.demo.stack import Stack, Workload


class Expect(StrEnum):
    RECLAIMED = "reclaimed"  # notice, grace, SIGTERM; the process exits, memory is freed
    KILLED = "killed"  # as reclaimed, but only SIGKILL ends it (it ignores SIGTERM)
    PROTECTED = "protected"  # flagged by the rules, refused by the actuator; never signalled
    CANCELLED = "cancelled"  # notified, then worked again within the grace: case cancelled
    UNTOUCHED = "untouched"  # never signalled, alive at the end


@dataclass(frozen=True)
class Role:
    label: str
    expect: Expect
    phases: str
    why: str
    gpu: int = 0
    memory: str = "4GiB"
    name: str | None = None
    module: str | None = None
    heartbeat: bool = False
    ignore_sigterm: bool = False
    cpu: bool = False

    def spawn(self, stack: Stack) -> Workload:
        return stack.spawn(
            self.label,
            phases=self.phases,
            gpu=self.gpu,
            memory=self.memory,
            name=self.name,
            module=self.module,
            heartbeat=self.heartbeat,
            ignore_sigterm=self.ignore_sigterm,
            cpu=self.cpu,
        )


# The demo's cast (DESIGN §1): one of each thing found on a shared GPU server.
DEMO_CAST: tuple[Role, ...] = (
    Role(
        "active training",
        Expect.UNTOUCHED,
        "busy",
        "YOLO training: util ~95 %, logs, heartbeat",
        name="yolo",
        memory="12GiB",
        heartbeat=True,
    ),
    Role(
        "abandoned training",
        Expect.RECLAIMED,
        "busy=5s,idle",
        "YOLO fine-tune whose notebook tab was closed: idle after 5 s",
        name="yolo",
        memory="6GiB",
    ),
    Role(
        "jupyter server",
        Expect.PROTECTED,
        "idle",
        "the Jupyter server: protected command",
        gpu=1,
        name="jupyter-lab",
        memory="512MiB",
    ),
    Role(
        "notebook kernel",
        Expect.RECLAIMED,
        "busy=3s,idle",
        "its idle kernel (ipykernel_launcher): not protected",
        gpu=1,
        module="ipykernel_launcher",
        memory="8GiB",
    ),
    Role(
        "tensorboard",
        Expect.PROTECTED,
        "idle",
        "TensorBoard: protected command",
        gpu=1,
        name="tensorboard",
        memory="1GiB",
    ),
    Role(
        "stubborn job",
        Expect.KILLED,
        "busy=4s,idle",
        "idle and ignores SIGTERM: needs SIGKILL",
        name="train-ddp",
        memory="10GiB",
        ignore_sigterm=True,
    ),
)


@dataclass(frozen=True)
class Verdict:
    done: bool  # the expected outcome is reached (for UNTOUCHED: nothing bad so far)
    failed: str | None  # a definitive miss, e.g. a signal to a protected process
    status: str  # what happened, in words


def judge(role: Role, workload: Workload, snap: Snapshot) -> Verdict:
    """Compare what the parts report about one workload with the role's expectation.

    A case that ends otherwise while the process lives is not final: at compressed time a
    machine stall of one second fails a scrape, the rules treat the gap as missing evidence
    and resolve (the fail-safe), and the next episode opens a new case. Only what cannot be
    undone is a failure: a signal to a process that must be left alone, or an exit without
    the memory being reclaimed.
    """
    cases = snap.cases_for(workload.pid)
    case = cases[0] if cases else None
    signals = snap.signals_for(workload.pid)
    alive = workload.alive()
    state = case["state"] if case else None
    status = state or ("exited" if not alive else "no case")
    if signals:
        status += " after " + "+".join(dict.fromkeys(signals))
    if case is not None and state in ("cancelled", "refused", "observed") and alive:
        status = f"{state} ({case['reason_code'] or case['reason']})"

    if role.expect in (Expect.RECLAIMED, Expect.KILLED):
        if state == "reclaimed" and not alive and case is not None:
            if role.expect == Expect.KILLED and "SIGKILL" not in signals:
                return Verdict(False, "ended without SIGKILL", status)
            return Verdict(
                True,
                None,
                f"reclaimed, {case['freed_bytes'] / 2**30:.1f} GiB freed"
                + (" (SIGKILL)" if "SIGKILL" in signals else ""),
            )
        if state == "failed" and case is not None:
            return Verdict(False, f"case failed: {case['reason']}", status)
        if not alive and state not in ("terminating", "killing"):
            return Verdict(False, f"exited without being reclaimed ({status})", status)
        return Verdict(False, None, status)

    # The others must never be signalled and must stay alive.
    if signals or any(c["state"] in EVER_SIGNALLED_STATES for c in cases):
        return Verdict(False, f"was signalled ({', '.join(signals) or state})", status)
    if not alive:
        return Verdict(False, "exited", status)
    if role.expect == Expect.PROTECTED:
        if state == "refused" and case and case["reason_code"] == "protected":
            return Verdict(True, None, "refused: protected")
        return Verdict(False, None, status)
    if role.expect == Expect.CANCELLED:
        if state == "cancelled" and case is not None:
            return Verdict(True, None, f"cancelled: {case['reason']}")
        return Verdict(False, None, status)
    return Verdict(True, None, "untouched" if case is None else status)
