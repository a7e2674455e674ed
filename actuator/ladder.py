"""The escalation ladder as data: one frozen rung per action a case can take.

Each rung says what the case's state becomes, the signal a bare process is sent (or the verb
a scheduler that owns the case carries out instead), whether the target is looked at once
more just before the rung is committed, whether its node's batch is committed at once,
which case fields record it, how long it runs (an `Effective` field) and which rung follows
when that time is up, and how its end is proven. The state machine (actuator/decisions.py),
the reconciler, the node's batch, the executor, the scheduler gate and the agent's wire
format read it, so adding a rung touches this table and the executor's handler for it (the
executor refuses to start without one). `python -m actuator.ladder` prints the table
docs/actuator.md shows; a test holds the two equal.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import StrEnum

from actuator.models import Reason, State


class Action(StrEnum):
    WAIT = "wait"  # nothing to do yet (samples may be updated)
    MOVE = "move"  # a state change without a side effect (cancel, refuse, observe, ...)
    NOTIFY = "notify"
    SUSPEND = "suspend"
    TERM = "sigterm"
    KILL = "sigkill"
    RESUME = "resume"  # the way back from the suspend rung, at the owner's ask (no rung)


class Verb(StrEnum):
    """What a scheduler that owns the case does at a rung, in its own terms."""

    STOP = "stop"
    FORCE = "force"


VERB_MEANING = {
    Verb.STOP: "scancel; the pod evicted (its budget honoured) or deleted",
    Verb.FORCE: "scancel --signal=KILL; the pod deleted with grace 0 (an eviction asked again)",
}


class EndProof(StrEnum):
    """How the node proves a rung has done what it was for."""

    NOTICE_DELIVERED = "the owner's channel accepted the notice (or the gate's fallback)"
    CHECKPOINTED = (
        "the driver says checkpointed, the PID is gone from NVML's list and the GPU's used "
        "memory is down by at least 90 % of the footprint, same process (start ticks)"
    )
    TREE_GONE = (
        "every recorded member is gone (pidfds), then NVML lists none of them on the GPU "
        "within release_timeout"
    )


@dataclass(frozen=True)
class Stamps:
    """The case fields that record when a rung was taken: wall time for people, the
    monotonic clock for its timeout."""

    wall: str
    mono: str


@dataclass(frozen=True)
class Rung:
    action: Action
    state: State  # the case's state while on this rung
    signal: signal.Signals | None  # sent to a bare process's tree
    verb: Verb | None  # carried out instead by a scheduler that owns the case
    last_look: bool  # the target is looked at once more right before the commit
    commits_alone: bool  # the node's batch is committed at once, and carried out first
    gated: bool  # a scheduler may hold it back (Scheduler.not_ready)
    limited: bool  # counted by the blast-radius limits (limits.per_node_hour, per_minute)
    takes_tree: bool  # records the process tree and its footprint; no other case may hold it
    optional: bool  # taken only where the process is eligible, else skipped to `then`
    stamps: Stamps | None
    timeout: str  # the Effective field: how long the rung runs before `then`
    then: Action | None  # the rung after the timeout; None: the case fails
    timeout_code: Reason  # the reason recorded when the timeout is up
    end: EndProof
    meaning: str


LADDER: tuple[Rung, ...] = (
    Rung(
        action=Action.NOTIFY,
        state=State.NOTIFIED,
        signal=None,
        verb=None,
        last_look=False,
        commits_alone=False,
        gated=False,
        limited=False,
        takes_tree=False,
        optional=False,
        stamps=None,  # notified_at and notified_mono: only once delivered (after_notice)
        timeout="grace",
        then=Action.SUSPEND,
        timeout_code=Reason.IDLE,
        end=EndProof.NOTICE_DELIVERED,
        meaning="the owner is warned, with a link to keep the job",
    ),
    Rung(
        action=Action.SUSPEND,
        state=State.SUSPENDING,
        signal=None,
        verb=None,
        last_look=True,
        commits_alone=True,
        gated=False,
        limited=False,
        takes_tree=True,
        optional=True,  # decisions.why_not_suspended
        stamps=Stamps("suspend_at", "suspend_mono"),
        timeout="suspend_max",
        then=Action.TERM,
        timeout_code=Reason.SUSPEND_EXPIRED,
        end=EndProof.CHECKPOINTED,
        meaning="the process's GPU state is checkpointed into its host memory; it lives on "
        "(`suspended` once proven) until its owner resumes it",
    ),
    Rung(
        action=Action.TERM,
        state=State.TERMINATING,
        signal=signal.SIGTERM,
        verb=Verb.STOP,
        last_look=True,
        commits_alone=True,
        gated=True,
        limited=True,
        takes_tree=True,
        optional=False,
        stamps=Stamps("term_at", "term_mono"),
        timeout="term_timeout",
        then=Action.KILL,
        timeout_code=Reason.TERM_TIMEOUT,
        end=EndProof.TREE_GONE,
        meaning="the process tree is asked to exit (SIGTERM, then SIGCONT)",
    ),
    Rung(
        action=Action.KILL,
        state=State.KILLING,
        signal=signal.SIGKILL,
        verb=Verb.FORCE,
        last_look=False,
        commits_alone=True,
        gated=False,
        limited=False,
        takes_tree=False,
        optional=False,
        stamps=Stamps("kill_at", "kill_mono"),
        timeout="kill_timeout",
        then=None,
        timeout_code=Reason.UNKILLABLE,
        end=EndProof.TREE_GONE,
        meaning="the survivors (and new same-uid descendants) are killed",
    ),
)

_BY_ACTION = {r.action: r for r in LADDER}
_BY_STATE = {r.state: r for r in LADDER}

# A case on a rung with a signal waits for its tree to end, not for its alert.
SIGNALLED_STATES = frozenset(r.state for r in LADDER if r.signal is not None)
SIGNAL_NAMES = tuple(r.signal.name for r in LADDER if r.signal is not None)
LIMITED = next(r for r in LADDER if r.limited)  # the rung the rate limits count
FIRST_SIGNAL = next(r for r in LADDER if r.signal is not None)  # what observe mode rehearses


def rung_of(action: Action) -> Rung:
    """The rung an action takes (KeyError for WAIT and MOVE, which are no rung)."""
    return _BY_ACTION[action]


def rung_for(action: Action) -> Rung | None:
    """The rung an action takes, or None for WAIT and MOVE."""
    return _BY_ACTION.get(action)


def rung_at(state: State) -> Rung | None:
    """The rung a case in `state` is on (None: not on the ladder)."""
    return _BY_STATE.get(state)


def next_rung(action: Action) -> Rung | None:
    rung = _BY_ACTION[action]
    return _BY_ACTION[rung.then] if rung.then is not None else None


def last_look_before(action: Action) -> bool:
    rung = _BY_ACTION.get(action)
    return rung is not None and rung.last_look


def commits_alone(action: Action) -> bool:
    rung = _BY_ACTION.get(action)
    return rung is not None and rung.commits_alone


def takes_tree(action: Action) -> bool:
    rung = _BY_ACTION.get(action)
    return rung is not None and rung.takes_tree


def table() -> str:
    """The ladder as the Markdown table in docs/actuator.md."""

    def yes(flag: bool) -> str:
        return "yes" if flag else ""

    head = (
        "| action | state | what it does | signal | scheduler | last look | commits alone "
        "| gated | limited | where eligible | records | runs for | then | end proven by |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    )
    rows = []
    for r in LADDER:
        records = []
        if r.stamps is not None:
            records += [r.stamps.wall, r.stamps.mono]
        if r.takes_tree:
            records += ["members", "gpu_memory_bytes"]
        then = f"`{r.then}`" if r.then is not None else f"`failed` ({r.timeout_code})"
        signal_name = r.signal.name if r.signal else ""
        verb = VERB_MEANING[r.verb] if r.verb else ""
        rows.append(
            f"| `{r.action}` | `{r.state}` | {r.meaning} | {signal_name} "
            f"| {verb} | {yes(r.last_look)} | {yes(r.commits_alone)} "
            f"| {yes(r.gated)} | {yes(r.limited)} | {yes(r.optional)} | {', '.join(records)} "
            f"| `{r.timeout}` | {then} | {r.end} |"
        )
    return "\n".join((*head, *rows))


if __name__ == "__main__":
    print(table())
