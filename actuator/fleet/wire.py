"""The agent protocol's bodies: the `Node` interface's arguments and answers as JSON.

Both sides validate with pydantic against the same dataclasses, so a field added to
`LiveState` travels without a second definition and a malformed body is refused whole.
"""

from __future__ import annotations

from signal import Signals
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from actuator.ladder import SIGNAL_NAMES
from actuator.models import LiveState, Member, SignalResult, Target
from actuator.rehearsal import Rehearsal

PROTOCOL = "gpu-reclaimer-agent/1"
MAX_MEMBERS = 10_000
# One node's due re-checks in one request (actuator/fleet/remote.py chunks more): each is a
# few /proc reads and one shared NVML reading, so a full batch answers well within a timeout.
MAX_INSPECT = 64

_live = TypeAdapter(LiveState)
_target = TypeAdapter(Target)
_members = TypeAdapter(list[Member])
_results = TypeAdapter(list[SignalResult])


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InspectRequest(_Body):
    target: Target


class InspectManyRequest(_Body):
    """Several re-checks in one request, answered in the order asked."""

    targets: list[Target] = Field(min_length=1, max_length=MAX_INSPECT)


class AliveRequest(_Body):
    members: list[Member] = Field(max_length=MAX_MEMBERS)


class RehearsalStep(_Body):
    """A tree and the ladder's signal for it: a rehearsal as it is, a signal step with its
    key."""

    target: Target
    members: list[Member] = Field(max_length=MAX_MEMBERS)
    signal: str = Field(pattern="^(" + "|".join(SIGNAL_NAMES) + ")$")  # the ladder's own

    @property
    def signum(self) -> Signals:
        return Signals[self.signal]


class SignalRequest(RehearsalStep):
    """One escalation step. `key` (case id and step) makes a retried or replayed request
    change nothing: the agent answers what it did the first time."""

    key: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$")
    dry_run: bool = False


class RehearseRequest(_Body):
    """A node's rehearsed steps (dry runs: nothing sent, nothing journalled), answered in
    the order asked."""

    steps: list[RehearsalStep] = Field(min_length=1, max_length=MAX_INSPECT)


class CheckpointRequest(_Body):
    """The suspend rung's checkpoint (`suspend`) or the owner's resume (`resume`), keyed as
    a signal step is: a retried or replayed request changes nothing."""

    key: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$")
    target: Target
    call: str = Field(pattern=r"^(suspend|resume)$")
    lock_timeout: float = Field(10.0, gt=0, le=60)
    need_bytes: int | None = Field(None, ge=0)  # resume: the GPU must show this much free
    # resume: GPUs given to a waiter, never the restore's place (UUIDs, as NVML names them)
    avoid: tuple[Annotated[str, Field(pattern=r"^[A-Za-z0-9-]{1,80}$")], ...] = Field(
        (), max_length=64
    )


def dump_live(live: LiveState) -> dict[str, Any]:
    return _live.dump_python(live, mode="json")


def load_live(data: Any) -> LiveState:
    return _live.validate_python(data)


def load_lives(data: Any, count: int) -> list[LiveState]:
    """An inspect-many answer: exactly `count` live states, or ValueError."""
    if not isinstance(data, list) or len(data) != count:
        raise ValueError(f"expected {count} live states, got {type(data).__name__}")
    return [_live.validate_python(item) for item in data]


def dump_target(target: Target) -> dict[str, Any]:
    return _target.dump_python(target, mode="json")


def load_target(data: Any) -> Target:
    return _target.validate_python(data)


def dump_members(members: list[Member]) -> list[dict[str, Any]]:
    return _members.dump_python(members, mode="json")


def load_members(data: Any) -> list[Member]:
    return _members.validate_python(data)


def dump_results(results: list[SignalResult]) -> list[dict[str, Any]]:
    return _results.dump_python(results, mode="json")


def load_results(data: Any) -> list[SignalResult]:
    return _results.validate_python(data)


def dump_rehearsal(rehearsal: Rehearsal) -> dict[str, Any]:
    return {
        "target": dump_target(rehearsal.target),
        "members": dump_members(list(rehearsal.members)),
        "signal": rehearsal.signal,
    }


def load_result_lists(data: Any, count: int) -> list[list[SignalResult]]:
    """Exactly `count` lists of results (one per step asked), or ValueError."""
    if not isinstance(data, list) or len(data) != count:
        raise ValueError(f"expected {count} result lists")
    return [_results.validate_python(results) for results in data]
