"""Where a suspended process is restored (pure): its own GPU first, then another GPU of the
same chip (the driver restores only onto the chip it was checkpointed on), each only where
its free memory, less what is held for others, covers the footprint. No place is "no
room": the restore waits, first in line, and the driver is not called (a restore into a
GPU without room fails, or leaves the process stuck).

What is held for others: the GPUs the node's wait list has given to a waiter since the
process was suspended and whose job has not appeared yet (actuator/demand/waitlist.py);
they are never its restore's place, until a process appears on them.
The wait list, in turn, holds the footprint of every restore its owner asked for on the
restore's own GPU (`held_for_restores`), so no waiter is given that room before it, and a
restore still waiting is demand at the front of the queue (`restore_requests`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from actuator.demand.model import Claimant, Request
from actuator.models import Case, State
from exporter.nvml_reader import NvmlReading
from exporter.units import format_size


@dataclass(frozen=True)
class GpuRoom:
    """One GPU as a restore sees it: its chip, and its free memory (None: unknown)."""

    index: int
    uuid: str
    chip: str
    free: int | None
    busy: bool = False  # NVML lists a process on it


@dataclass(frozen=True)
class Placement:
    """The GPU to restore onto (None: no room anywhere; `why` says what was seen)."""

    gpu: GpuRoom | None
    why: str

    @property
    def moved(self) -> bool:
        """Onto another GPU than its own (the driver remaps the process's GPU)."""
        return self.gpu is not None and self.why.startswith("onto another")


def rooms(reading: NvmlReading | None) -> list[GpuRoom] | None:
    """The node's GPUs with their free memory (None: NVML cannot say)."""
    if reading is None or not reading.up:
        return None
    out = []
    for g in reading.gpus:
        total, used = g.memory_total, g.memory_used
        free = total - used if total is not None and used is not None else None
        out.append(GpuRoom(g.index, g.uuid, g.name, free, busy=bool(g.processes)))
    return out


def place_restore(
    own: str, need: int, gpus: Sequence[GpuRoom], avoid: Iterable[str] = ()
) -> Placement | None:
    """Where `need` bytes go: `own` (its GPU's UUID) if it has the room, else the same chip's
    GPU with the most room; a Placement without a GPU where none has it. None where its own
    GPU cannot be read: unknown is not "no room", and the driver judges."""
    # A promise ends as soon as a process appears on its GPU (as the wait list judges it):
    # the reading's free memory then counts the waiter's job.
    promised = set(avoid) - {g.uuid for g in gpus if g.busy}
    mine = next((g for g in gpus if g.uuid == own), None)
    if mine is None or mine.free is None:
        return None
    if mine.uuid not in promised and mine.free >= need:
        return Placement(mine, f"onto its own GPU {mine.index}: {format_size(mine.free)} free")
    same = [
        g
        for g in gpus
        # A chip NVML did not name is no chip: unknown is never "the same".
        if mine.chip
        and g.uuid != own
        and g.chip == mine.chip
        and g.uuid not in promised
        and g.free is not None
    ]
    fits = sorted((g for g in same if g.free is not None and g.free >= need), key=_most_room)
    if fits:
        best = fits[0]
        return Placement(
            best,
            f"onto another {best.chip or 'GPU'}, GPU {best.index}: {format_size(best.free or 0)} "
            f"free (its own GPU {mine.index} has {format_size(mine.free)})",
        )
    held = " (given to a waiter)" if mine.uuid in promised else ""
    others = f", nor on the {len(same)} other GPU(s) of its chip" if same else ""
    return Placement(
        None,
        f"no room on GPU {mine.index}: {format_size(mine.free)} free{held}, "
        f"{format_size(need)} needed{others}",
    )


def _most_room(g: GpuRoom) -> tuple[int, int]:
    return (-(g.free or 0), g.index)


@dataclass(frozen=True)
class AskedRestore:
    """A suspended process its owner asked back and not yet restored: its GPU and
    footprint (the place the wait list holds for it)."""

    uuid: str
    footprint: int


def held_for_restores(asked: Iterable[AskedRestore]) -> dict[str, int]:
    """Bytes held on each GPU for the restores asked there."""
    out: dict[str, int] = {}
    for a in asked:
        out[a.uuid] = out.get(a.uuid, 0) + a.footprint
    return out


def restore_requests(cases: Iterable[Case]) -> tuple[Request, ...]:
    """The restores waiting for room, as demand at the front of the queue: each one's
    footprint on its own GPU, for its owner (pure). Where the rules reclaim on demand, an
    idle process on that GPU may go for it; nothing else changes for anyone."""
    out = []
    for c in cases:
        waiting = c.state == State.SUSPENDED and c.resume_requested_mono is not None
        if not waiting or not c.restore_waits or not c.gpu_memory_bytes:
            continue
        owner = c.user or f"uid {c.uid}"
        out.append(
            Request(
                source="resume",
                key=str(c.id),
                who=f"{owner}'s suspended job (case {c.id}), asked back",
                gpus=0,
                memory_bytes=c.gpu_memory_bytes,
                nodes=(c.node,),
                since=c.suspend_at,
                claimant=Claimant(uid=c.uid),
                on_gpus=(c.uuid,),
                first=True,
            )
        )
    return tuple(out)
