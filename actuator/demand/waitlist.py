"""The node's wait list: `gpu-reclaimer wait --gpus N` for hosts with no scheduler.

Callers wait in the order they came; each is offered what it needs of the GPUs free now
(whole GPUs no process holds, listed or not, or one GPU with enough free memory), first
come first. A GPU given to a waiter is not offered to another until a process appears on it
(at most RESERVE_S: the time its job may take to start). Whether it appeared is judged only
on a reading taken after the GPU was given and after any worker saw the job there: a
reading from before could show the GPU empty and give it twice.
What the free GPUs cannot serve is demand (`WaitListDemand`): under `reclaim_when: demand`
an idle process may be reclaimed for it, and the waiter is told the moment its GPU is free.
Demand is one request per uid at a time, and none while a GPU reclaimed for that uid is unused:
a waiter costs others at most one reclaim at a time.
A suspended process whose owner asked it back goes first: its footprint is held on its own
GPU (never offered to a waiter), and a GPU given to a waiter since it was suspended is never
its restore's place (`promised_gpus`; actuator/restore_place.py).
"""

from __future__ import annotations

import pwd
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from actuator.demand.model import Claimant, DemandError, Reading, Request
from actuator.models import Case, State
from actuator.restore_place import AskedRestore, held_for_restores
from actuator.store import Store, Waiter
from exporter import procfs
from exporter.nvml_reader import NvmlReading
from exporter.units import format_size

RESERVE_S = 60.0  # at most: the promise ends as soon as a process appears on the GPU
# Once its job was seen, a GPU still counts as given for this long: another worker's
# reading, though taken later, may come from an older sample of the driver's state
# (sampled, not read live) and show the GPU empty before the job appeared.
SEEN_SETTLE_S = 2.0
# The node's latest cases, where a GPU reclaimed for a waiter is looked for (a reclaim
# within RESERVE_S is among them on any node that is not reclaiming hundreds a minute).
RECENT_CASES = 200
OFFERS_TTL_S = 0.2  # waiters polling together share one computation
# A GPU with no process listed is empty only while its used memory is no more than the
# driver's own: beyond it, something NVML does not list (a process in another container,
# a context leaked on exit) holds it, and giving it away would put two jobs on one GPU.
UNLISTED_MEMORY_BYTES = 1 << 30


@dataclass(frozen=True)
class FreeGpu:
    index: int
    uuid: str
    memory_free: int | None  # bytes; None: unknown
    empty: bool  # no process holds memory on it, listed or not

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "uuid": self.uuid, "memory_free": self.memory_free}


def free_gpus(
    reading: NvmlReading | None, reserved: set[str], held: dict[str, int] | None = None
) -> list[FreeGpu] | None:
    """The node's GPUs as a waiter may be offered them (None: NVML cannot say), less the
    bytes `held` on each for the restores asked there (such a GPU is never empty)."""
    if reading is None or not reading.up or reading.failed_gpus:
        return None
    held = held or {}
    out = []
    for g in reading.gpus:
        if g.uuid in reserved:
            continue
        used, total = g.memory_used, g.memory_total
        free = total - used if total is not None and used is not None else None
        kept = held.get(g.uuid, 0)
        if free is not None:
            free = max(0, free - kept)
        unheld = used is not None and used <= UNLISTED_MEMORY_BYTES  # unknown: not empty
        out.append(FreeGpu(g.index, g.uuid, free, empty=unheld and not g.processes and not kept))
    return out


def asked_restores(cases: Sequence[Case]) -> list[AskedRestore]:
    """The suspended processes whose owners asked them back, not yet running (pure)."""
    return [
        AskedRestore(c.uuid, c.gpu_memory_bytes or 0)
        for c in cases
        if c.state == State.RESUMING
        or (c.state == State.SUSPENDED and c.resume_requested_mono is not None)
    ]


def promised_gpus(
    store: Store, clock: Callable[[], float], node: str, since: float
) -> tuple[str, ...]:
    """GPUs given to a waiter on `node` since `since` (wall clock: when the process to
    restore was suspended) whose job has not appeared yet (within RESERVE_S): never its
    restore's place. A gift from before its suspension was made with its footprint on the
    GPU, so its coming back takes nothing that gift counted on."""
    promised = store.promised(node, max(clock() - RESERVE_S, since))
    return tuple(sorted({g for w in promised if not w.taken for g in w.given}))


def assign(waiters: Sequence[Waiter], gpus: Sequence[FreeGpu]) -> dict[int, tuple[FreeGpu, ...]]:
    """First come first: each waiter in turn takes what it needs of what is left; one that
    cannot be served yet lets a later, smaller one go ahead (pure)."""
    left = list(gpus)
    out: dict[int, tuple[FreeGpu, ...]] = {}
    for w in waiters:
        if w.gpus:
            empty = [g for g in left if g.empty][: w.gpus]
            taken = tuple(empty) if len(empty) == w.gpus else ()
        else:
            fit = next((g for g in left if (g.memory_free or 0) >= w.memory_bytes), None)
            taken = (fit,) if fit is not None else ()
        if taken:
            out[w.id] = taken
            left = [g for g in left if g not in taken]
    return out


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


class WaitList:
    """The queue on this node, read from the store (every worker sees the same)."""

    def __init__(
        self,
        store: Store,
        node: str,
        reading: Callable[[float], NvmlReading | None],  # taken after a wall-clock time
        clock: Callable[[], float],
        proc_root: Path = procfs.PROC,
    ) -> None:
        self.store, self.node, self.reading = store, node, reading
        self.clock, self.proc_root = clock, proc_root
        self._lock = threading.Lock()
        self._offers: tuple[float, dict[int, tuple[FreeGpu, ...]]] = (float("-inf"), {})

    def _alive(self, w: Waiter) -> bool:
        """The caller still waits: that very process (its start ticks) is alive."""
        return procfs.start_ticks(w.pid, self.proc_root) == w.start_ticks

    def pending(self) -> list[Waiter]:
        return [w for w in self.store.waiters(self.node, self.clock()) if self._alive(w)]

    def never_met(self, gpus: int, memory: int) -> str | None:
        """Why this node can never meet the request (more GPUs than it has, more memory
        than its largest card), or None: it can, or NVML cannot say now (then it waits)."""
        reading = self.reading(float("-inf"))
        if reading is None or not reading.up or reading.failed_gpus or not reading.gpus:
            return None
        have = len(reading.gpus)
        if gpus > have:
            return f"{self.node} has {have} GPU{'s' if have != 1 else ''}, not {gpus}"
        sizes = [g.memory_total for g in reading.gpus]
        if memory and all(size is not None for size in sizes):
            largest = max(size for size in sizes if size is not None)
            if memory > largest:
                return (
                    f"no GPU on {self.node} has {format_size(memory)}: the largest has "
                    f"{format_size(largest)}"
                )
        return None

    def unserved_because(self) -> str:
        """What the node's GPUs hold now, for a waiter whose time ran out."""
        reading = self.reading(float("-inf"))
        if reading is None or not reading.up or reading.failed_gpus:
            return "NVML could not say which GPUs are free"
        held = sum(1 for g in reading.gpus if g.processes or (g.memory_used or 0) > 0)
        return (
            f"{held} of {len(reading.gpus)} GPUs held by processes the actuator did not "
            "reclaim (working, kept or protected, or demand is not enabled for them)"
        )

    def free(self) -> list[FreeGpu] | None:
        promised = self.store.promised(self.node, self.clock() - RESERVE_S)
        # Newer than every promise and every sighting of a promised job (by any worker).
        newest = max((max(w.ended or 0.0, w.taken) for w in promised), default=float("-inf"))
        reading = self.reading(newest)
        if reading is None:
            return None
        seen_at = self.clock()
        occupied = {g.uuid for g in reading.gpus if g.processes}
        reserved: set[str] = set()
        for w in promised:
            if w.taken:
                if seen_at - w.taken < SEEN_SETTLE_S and not occupied & set(w.given):
                    reserved |= set(w.given)  # empty on a lagging sample, not left yet
                continue  # its job was seen: a newer reading shows what holds the GPU now
            if occupied & set(w.given):
                self.store.mark_taken(w.id, seen_at)  # its job started: the promise is kept
            else:
                reserved |= set(w.given)
        asked = [
            c
            for state in (State.SUSPENDED, State.RESUMING)
            for c in self.store.list_cases(state=state, node=self.node, limit=RECENT_CASES)
        ]
        return free_gpus(reading, reserved, held_for_restores(asked_restores(asked)))

    def offers(self) -> dict[int, tuple[FreeGpu, ...]]:
        """What each waiter may be given now (one computation shared for OFFERS_TTL_S)."""
        with self._lock:
            at, offers = self._offers
            if time.monotonic() - at < OFFERS_TTL_S:
                return offers
            offers = assign(self.pending(), self.free() or [])
            self._offers = (time.monotonic(), offers)
            return offers


def one_per_waiter(
    waiting: Sequence[Waiter], served: dict[int, tuple[FreeGpu, ...]], holding: set[int]
) -> list[Waiter]:
    """The waiters that are demand: not served by free GPUs, at most one per uid (its
    oldest), and none for a uid that holds a GPU reclaimed for it and not yet used. One waiter
    therefore costs others at most one reclaim at a time, however many `wait`s it opens
    (pure)."""
    out: list[Waiter] = []
    seen = set(holding)
    for w in waiting:
        if w.id in served or w.uid in seen:
            continue
        seen.add(w.uid)
        out.append(w)
    return out


class WaitListDemand:
    """Demand: the waiters the free GPUs cannot serve now."""

    name = "wait"

    def __init__(self, waitlist: WaitList) -> None:
        self.waitlist = waitlist

    def read(self) -> Reading:
        waiting = self.waitlist.pending()
        if not waiting:
            return Reading()
        free = self.waitlist.free()
        if free is None:
            raise DemandError("the node's GPUs cannot be read: what is free is unknown")
        served = assign(waiting, free)
        requests = tuple(self._request(w) for w in one_per_waiter(waiting, served, self._holding()))
        # Free GPUs no waiter could take alone: a reclaim beside them may serve one.
        given = {g.uuid for gpus in served.values() for g in gpus}
        left = sum(1 for g in free if g.empty and g.uuid not in given)
        return Reading(requests, {self.waitlist.node: left})

    def _holding(self) -> set[int]:
        """Uids given a GPU that was reclaimed for them and that their job has not yet
        taken (within RESERVE_S): a GPU that was free when given cost nobody anything."""
        since = self.waitlist.clock() - RESERVE_S
        unused = [w for w in self.waitlist.store.promised(self.waitlist.node, since) if not w.taken]
        if not unused:
            return set()
        recent = self.waitlist.store.list_cases(node=self.waitlist.node, limit=RECENT_CASES)
        reclaimed_for = {c.demand_for for c in recent if c.demand_for}
        return {w.uid for w in unused if f"{self.name}:{w.id}" in reclaimed_for}

    def _request(self, w: Waiter) -> Request:
        return Request(
            source=self.name,
            key=str(w.id),
            who=user_name(w.uid),  # how they wait is the notice template's to say
            gpus=w.gpus,
            memory_bytes=w.memory_bytes or None,
            nodes=(self.waitlist.node,),
            since=w.created,
            claimant=Claimant(uid=w.uid),
        )
