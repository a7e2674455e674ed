"""The node's wait list (`gpu-reclaimer wait`): real processes wait on a real actuator's
socket, first come first. A GPU already free is given at once (nothing is reclaimed for it);
the next waiter is demand, so an idle process under `reclaim_when: demand` is warned again,
reclaimed after the grace, and its GPU handed to that waiter; a third waiter, whom nothing
can serve, keeps waiting and leaves the queue when it hangs up."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from actuator.demand.waitlist import (
    SEEN_SETTLE_S,
    FreeGpu,
    WaitList,
    WaitListDemand,
    assign,
    free_gpus,
    promised_gpus,
)
from actuator.models import State
from actuator.store import Store
from actuator.store.cases import insert_case
from actuator.store.waiters import SERVED, Waiter
from exporter import procfs
from exporter.nvml_reader import GpuProcessReading, GpuReading, NvmlReading
from exporter.sim.state import init_node
from tests.helpers.actuator import Workloads, alert_for, payload
from tests.helpers.cases import make_case
from tests.support import gpu_reclaimer_command, wait_until

GIB = 1 << 30


def _waiter(wid: int, gpus: int = 1, memory: int = 0) -> Waiter:
    return Waiter(wid, "n", 1000, 100 + wid, 1, gpus, memory, 0.0, 1e12, "waiting", None, ())


def _gpu(index: int, used: int, *pids: int) -> GpuReading:
    procs = tuple(GpuProcessReading(p, GIB, 0.0) for p in pids)
    return GpuReading(index, f"GPU-{index}", "H100", 80 * GIB, used, 0.0, True, procs)


def test_free_gpus_are_offered_first_come_first():
    reading = NvmlReading(True, gpus=(_gpu(0, 0), _gpu(1, 70 * GIB, 7), _gpu(2, 0)))
    gpus = free_gpus(reading, reserved={"GPU-2"})
    assert gpus is not None and [g.uuid for g in gpus] == ["GPU-0", "GPU-1"]
    assert free_gpus(NvmlReading(False), set()) is None  # unknown, never "all free"
    two, one, memory = _waiter(1, gpus=2), _waiter(2), _waiter(3, gpus=0, memory=8 * GIB)
    offers = assign([two, one, memory], gpus)
    # Two whole GPUs are not free: the one-GPU waiter goes ahead; memory fits beside job 7.
    assert {w: [g.uuid for g in given] for w, given in offers.items()} == {
        2: ["GPU-0"],
        3: ["GPU-1"],
    }
    assert assign([memory], [FreeGpu(0, "GPU-0", 4 * GIB, False)]) == {}


class _Worker:
    """One actuator worker's view of the node: a reading shared for a while (TTL), and
    taken again when the caller needs one from after some time (as actuator/node.py's)."""

    TTL = 0.5

    def __init__(self, node: dict[str, tuple[int, ...]], clock: list[float]) -> None:
        self.node, self.clock = node, clock
        self.cached: tuple[float, NvmlReading] | None = None
        self.fresh_readings = 0

    def reading(self, not_before: float) -> NvmlReading:
        at = self.cached[0] if self.cached is not None else float("-inf")
        if self.clock[0] - at >= self.TTL or at < not_before:
            self.fresh_readings += 1
            gpus = tuple(_gpu(i, GIB * len(p), *p) for i, p in enumerate(self.node.values()))
            self.cached = (self.clock[0], NvmlReading(True, gpus=gpus))
        assert self.cached is not None
        return self.cached[1]


def test_a_gpu_given_to_a_waiter_is_never_given_again_on_a_reading_from_before(tmp_path):
    """Two workers share the queue: one saw the first waiter's job start on GPU-0 (the
    promise is kept); the other still holds a reading from before the job appeared, on
    which GPU-0 looks empty. It must read again, not give GPU-0 to the second waiter."""
    store, now = Store(tmp_path / "db"), [100.0]
    store.init()
    node: dict[str, tuple[int, ...]] = {"GPU-0": (), "GPU-1": (9,)}
    a, b = _Worker(node, now), _Worker(node, now)
    first = store.add_waiter("n", 1000, 101, 1, 1, 0, now[0], now[0] + 600)
    lists = [WaitList(store, "n", w.reading, lambda: now[0]) for w in (a, b)]
    assert [(g.uuid, g.empty) for g in lists[0].free() or []] == [
        ("GPU-0", True),
        ("GPU-1", False),
    ]
    assert store.end_waiter(first, SERVED, now[0], ("GPU-0",))
    now[0] = 100.5
    assert [g.uuid for g in lists[1].free() or []] == ["GPU-1"]  # GPU-0 is promised
    assert b.cached is not None and b.cached[0] == 100.5  # after the promise; job not there
    now[0], node["GPU-0"] = 100.8, (4242,)  # the job starts; worker A sees it
    assert [(g.uuid, g.empty) for g in lists[0].free() or []] == [
        ("GPU-0", False),
        ("GPU-1", False),
    ]
    (kept,) = store.promised("n", 0.0)
    assert kept.taken == 100.8
    # Worker B: its reading (100.5, within its TTL) is older than the sighting: it reads again.
    before = b.fresh_readings
    assert [g.empty for g in lists[1].free() or []] == [False, False]
    assert b.fresh_readings == before + 1
    # A reading taken after the sighting may still come from an older sample of the
    # driver's state, showing GPU-0 empty: just after the sighting it stays given.
    now[0], node["GPU-0"] = 101.0, ()
    b.cached = None
    assert [g.uuid for g in lists[1].free() or []] == ["GPU-1"]
    # The job has exited: once the sighting has settled, an empty GPU-0 is free for anyone.
    now[0] = 100.8 + SEEN_SETTLE_S
    b.cached = None
    assert [(g.uuid, g.empty) for g in lists[1].free() or []] == [("GPU-0", True), ("GPU-1", False)]


def test_a_restore_asked_back_holds_its_place_and_a_waiters_gpu_is_not_its_place(tmp_path):
    """A suspended job its owner asked back goes first: its footprint on its own GPU is
    never offered to a waiter (and that GPU is not empty for a whole-GPU one); a GPU given
    to a waiter since the suspension, its job not there yet, is never a restore's place."""
    store, now = Store(tmp_path / "db"), [100.0]
    store.init()
    node: dict[str, tuple[int, ...]] = {"GPU-0": (), "GPU-1": ()}
    waitlist = WaitList(store, "n", _Worker(node, now).reading, lambda: now[0])
    asked = make_case(
        id=3, node="n", uuid="GPU-0", state=State.SUSPENDED, gpu_memory_bytes=70 * GIB
    )
    asked.resume_requested_mono = 5.0
    unasked = make_case(id=4, node="n", uuid="GPU-1", state=State.SUSPENDED, gpu_memory_bytes=GIB)
    with store._tx() as conn:
        insert_case(conn, asked, {})
        insert_case(conn, unasked, {})  # suspended, not asked back: its GPU is free for all
    free = waitlist.free() or []
    assert [(g.uuid, g.memory_free, g.empty) for g in free] == [
        ("GPU-0", 10 * GIB, False),
        ("GPU-1", 80 * GIB, True),
    ]
    big = _waiter(1, gpus=0, memory=20 * GIB)
    assert {w: [g.uuid for g in gs] for w, gs in assign([big], free).items()} == {1: ["GPU-1"]}
    suspended_at = now[0] - 10
    assert promised_gpus(store, lambda: now[0], "n", suspended_at) == ()
    given = store.add_waiter("n", 1000, 101, 1, 1, 0, now[0], now[0] + 600)
    assert store.end_waiter(given, SERVED, now[0], ("GPU-1",))
    assert promised_gpus(store, lambda: now[0], "n", suspended_at) == ("GPU-1",)
    # Given before the suspension: made with its footprint on the GPU, no place of its own.
    assert promised_gpus(store, lambda: now[0], "n", now[0] + 1) == ()
    store.mark_taken(given, now[0] + 1)  # its job appeared: the reading shows what holds it
    assert promised_gpus(store, lambda: now[0], "n", suspended_at) == ()


@pytest.mark.reliability(53, 60)
def test_defect_5_a_waiter_costs_others_at_most_one_reclaim_at_a_time(tmp_path):
    """Every GPU is held. One uid opens two `wait`s: only its first is demand. Once a GPU
    reclaimed for it is given to it and sits unused, none of its waits is demand until its
    job takes the GPU; another uid's wait is demand throughout."""
    store, now = Store(tmp_path / "db"), [100.0]
    store.init()
    node: dict[str, tuple[int, ...]] = {"GPU-0": (7,), "GPU-1": (8,)}
    worker = _Worker(node, now)
    waitlist = WaitList(store, "n", worker.reading, lambda: now[0])
    me, ticks = os.getpid(), procfs.start_ticks(os.getpid())
    assert ticks is not None
    first = store.add_waiter("n", 1000, me, ticks, 1, 0, now[0], now[0] + 600)
    second = store.add_waiter("n", 1000, me, ticks, 1, 0, now[0] + 1, now[0] + 600)
    demand = WaitListDemand(waitlist)
    assert [r.key for r in demand.read().requests] == [str(first)]
    # GPU-0's idle job was reclaimed for the first wait, and the GPU given to it.
    with store._tx() as conn:
        insert_case(conn, make_case(id=9, node="n", demand_for=f"wait:{first}"), {})
    node["GPU-0"] = ()
    assert store.end_waiter(first, SERVED, now[0], ("GPU-0",))
    now[0] += 1
    worker.cached = None
    assert demand.read().requests == ()  # the second wait costs nothing while GPU-0 waits
    other = store.add_waiter("n", 2000, me, ticks, 1, 0, now[0], now[0] + 600)
    assert [r.key for r in demand.read().requests] == [str(other)]
    node["GPU-0"] = (4242,)  # the first wait's job took its GPU
    now[0] += 1
    worker.cached = None
    assert [r.key for r in demand.read().requests] == [str(second), str(other)]


def _wait(sock: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*gpu_reclaimer_command(), "wait", *args, "--socket", str(sock)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# A stranger's `wait`: the standard library only, as uid 65534.
STRANGER = (
    "import json, socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
    "s.sendall(json.dumps({'action': 'wait', 'gpus': 1, 'seconds': 600}).encode() + bytes([10]));"
    " f = s.makefile(); print(f.readline(), flush=True); print(f.readline(), flush=True)"
)


def _listed(sock: Path) -> str:
    done = subprocess.run(
        [*gpu_reclaimer_command(), "wait", "--list", "--socket", str(sock)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.reliability(53)
def test_waiters_get_a_free_gpu_then_a_reclaimed_one(tmp_path, actuator_factory, request):
    node = tmp_path / "node3"
    init_node(node, gpus=3, memory_total=80 * GIB, name="NVIDIA H100 80GB HBM3")
    workloads = Workloads(node)
    request.addfinalizer(workloads.cleanup)
    idle = workloads.spawn(gpu=0, phases="idle")
    busy = workloads.spawn(gpu=1, phases="busy")
    shared = Path(tempfile.mkdtemp(prefix="wait-socket-"))  # reachable by another uid
    shared.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    sock = shared / "keep.sock"
    actuator = actuator_factory(
        node,
        server={"keep_socket": str(sock)},
        defaults={"reclaim_when": "demand", "grace": "1s"},
        demand={"wait_list": True, "interval": "0.2s"},
    )
    wait_until(sock.exists, 20)
    assert actuator.post(payload(alert_for(idle))).status_code == 200
    wait_until(lambda: (actuator.case_for(idle) or {}).get("state") == "notified", 20)

    first = _wait(sock, "--gpus", "1", "--for", "2m")  # GPU 2 is free: given at once
    out, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    assert out.strip().splitlines()[-1] == "export CUDA_VISIBLE_DEVICES=2" and "GPU 2" in err
    # The documented `eval "$(gpu-reclaimer wait ...)" && python train.py` gives it to the job.
    child = 'import os; print(os.environ["CUDA_VISIBLE_DEVICES"])'
    script = f"eval \"$1\" && {sys.executable} -c '{child}'"
    seen = subprocess.run(["bash", "-c", script, "_", out], capture_output=True, text=True)
    assert seen.stdout.strip() == "2", seen
    assert actuator.case_for(idle)["demand"] is None and idle.proc.poll() is None

    second = _wait(sock, "--gpus", "1", "--for", "2m")  # GPU 2 is promised: demand
    case = actuator.wait_state(idle, "reclaimed", "cancelled", "refused", "failed", timeout=60)
    assert case["state"] == "reclaimed" and case["demand"]["for"].startswith("wait:"), case
    out, err = second.communicate(timeout=30)
    assert second.returncode == 0, err
    assert out.strip().splitlines()[-1] == "export CUDA_VISIBLE_DEVICES=0"
    assert busy.proc.poll() is None  # never a candidate
    job = workloads.spawn(gpu=0, phases="busy")  # the waiter's job (its uid) takes GPU 0

    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    stranger = subprocess.Popen(
        [python, "-c", STRANGER, str(sock)],
        user=65534,
        group=65534,
        extra_groups=[],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    assert stranger.stdout is not None
    queued = json.loads(stranger.stdout.readline())
    assert queued["ok"] and queued["position"] == 1
    listed = _listed(sock)
    assert "(uid 65534) wants 1 GPU(s)" in listed and listed.startswith("  1.")
    stranger.kill()
    stranger.wait(10)
    wait_until(lambda: "nobody is waiting" in _listed(sock), 15, 0.3)
    # Freed for the request at the reclaim; handed off once the waiter's own process holds it.
    freed = actuator.records("freed_for_request")
    assert [a["request"] for a in freed] == [case["demand"]["for"]]
    wait_until(lambda: actuator.records("handed_off"), 15, 0.3)
    (handed,) = actuator.records("handed_off")
    assert handed["request"] == case["demand"]["for"] and handed["holders"] == [job.pid]
    assert [a["uid"] for a in actuator.audit("wait")] == [0, 0, 65534]
    assert len(actuator.audit("wait_served")) == 2
