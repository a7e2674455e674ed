"""Where a suspended process is restored (actuator/restore_place.py), pure: its own GPU
first, then the same chip's GPU with the most room, never a GPU given to a waiter, never a
GPU of another chip; no room is said in words; unknown is left to the driver. And the
restores asked back, as the wait list's held places and as demand at the front of the
queue."""

from __future__ import annotations

from actuator.models import State
from actuator.restore_place import (
    AskedRestore,
    GpuRoom,
    held_for_restores,
    place_restore,
    restore_requests,
    rooms,
)
from exporter.nvml_reader import GpuReading, NvmlReading
from tests.helpers.cases import make_case

GiB = 1024**3
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"


def gpu(index: int, free: int | None, chip: str = H100) -> GpuRoom:
    return GpuRoom(index, f"GPU-{index}", chip, free)


def test_its_own_gpu_first_then_the_same_chip_with_the_most_room() -> None:
    gpus = [gpu(0, 10 * GiB), gpu(1, 20 * GiB), gpu(2, 30 * GiB), gpu(3, 70 * GiB, A100)]
    own = place_restore("GPU-0", 8 * GiB, gpus)
    assert own is not None and own.gpu == gpus[0] and not own.moved
    assert "onto its own GPU 0: 10.0 GiB free" in own.why
    moved = place_restore("GPU-0", 12 * GiB, gpus)
    assert moved is not None and moved.gpu == gpus[2] and moved.moved  # most room, same chip
    assert "GPU 2: 30.0 GiB free (its own GPU 0 has 10.0 GiB)" in moved.why
    none = place_restore("GPU-0", 40 * GiB, gpus)  # only the A100 has 40 GiB: not its chip
    assert none is not None and none.gpu is None
    assert none.why == (
        "no room on GPU 0: 10.0 GiB free, 40.0 GiB needed, nor on the 2 other GPU(s) of its chip"
    )


def test_a_gpu_given_to_a_waiter_is_no_place_and_unknown_is_left_to_the_driver() -> None:
    gpus = [gpu(0, 50 * GiB), gpu(1, 50 * GiB), gpu(2, None)]
    placed = place_restore("GPU-0", 8 * GiB, gpus, avoid=("GPU-0",))
    assert placed is not None and placed.gpu == gpus[1]
    nowhere = place_restore("GPU-0", 8 * GiB, gpus, avoid=("GPU-0", "GPU-1"))
    assert nowhere is not None and nowhere.gpu is None and "(given to a waiter)" in nowhere.why
    taken = [gpu(0, 2 * GiB), GpuRoom(1, "GPU-1", H100, 50 * GiB, busy=True)]
    kept = place_restore("GPU-0", 8 * GiB, taken, avoid=("GPU-1",))  # the waiter's job is there
    assert kept is not None and kept.gpu == taken[1]  # the promise is kept: its room is real
    unnamed = [gpu(0, 2 * GiB, chip=""), gpu(1, 50 * GiB, chip="")]
    stays = place_restore("GPU-0", 8 * GiB, unnamed)  # chips unnamed: never "the same chip"
    assert stays is not None and stays.gpu is None
    assert place_restore("GPU-2", 8 * GiB, gpus) is None  # its own GPU unread: the driver
    assert place_restore("GPU-9", 8 * GiB, gpus) is None  # not listed: the driver judges


def test_rooms_read_from_nvml_and_nothing_when_it_is_down() -> None:
    reading = NvmlReading(
        True,
        gpus=(
            GpuReading(0, "GPU-0", H100, 80 * GiB, 30 * GiB, 0.0, True, ()),
            GpuReading(1, "GPU-1", H100, None, 30 * GiB, 0.0, True, ()),
        ),
    )
    assert rooms(reading) == [gpu(0, 50 * GiB), gpu(1, None)]  # no process listed: not busy
    assert rooms(NvmlReading(False)) is None and rooms(None) is None


def test_restores_asked_back_hold_their_place_and_wait_at_the_front_of_the_queue() -> None:
    assert held_for_restores(
        [AskedRestore("GPU-0", 4 * GiB), AskedRestore("GPU-0", GiB), AskedRestore("GPU-1", GiB)]
    ) == {"GPU-0": 5 * GiB, "GPU-1": GiB}
    base = dict(state=State.SUSPENDED, gpu_memory_bytes=4 * GiB, user="bob", uid=1000)
    waiting = make_case(id=7, resume_requested_mono=5.0, restore_waits=2, **base)
    asked = make_case(id=8, resume_requested_mono=5.0, **base)  # not looked at for room yet
    alone = make_case(id=9, restore_waits=1, **base)  # nobody asked it back
    running = make_case(id=10, state=State.SNOOZED, restore_waits=1, resume_requested_mono=5.0)
    (request,) = restore_requests([waiting, asked, alone, running])
    assert (request.source, request.key, request.first) == ("resume", "7", True)
    assert (request.gpus, request.memory_bytes, request.on_gpus) == (0, 4 * GiB, ("GPU-0",))
    assert request.claimant is not None and request.claimant.uid == 1000  # proves the hand-off
    assert request.who == "bob's suspended job (case 7), asked back"
