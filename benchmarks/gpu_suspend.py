"""Suspend and resume on a real GPU through the CUDA driver's checkpoint API: the check the
suspend rung waits for (issue 58). Run by `benchmarks/real_gpu.py --suspend`, or alone:

    python benchmarks/gpu_suspend.py [--gpu 0] [--sizes 8,40] [--out FILE.json]

For each size (GiB, skipped where the GPU has no room): a process makes a CUDA context,
allocates that much device memory and fills it with a pattern, then waits (what an idle
session holds). This script, as the actuator's node would, then

  lock        cuCheckpointProcessLock (10 s timeout)
  checkpoint  cuCheckpointProcessCheckpoint: the GPU memory into the process's host memory
  suspended   what NVML says now: the PID listed or not, the GPU's used memory, and the
              process's host memory (RSS) grown by the footprint
  restore     cuCheckpointProcessRestore onto the same GPU
  unlock      cuCheckpointProcessUnlock
  verify      the process reads its memory back (64 MiB at 8 places) and compares it with
              the pattern, then writes and reads again: the restored context works

each step timed. Then a restore into a full GPU: one process suspended, another allocating
all but half of its footprint, the restore tried (it must fail and leave the process
checkpointed), the filler stopped, the restore tried again and verified. Where the machine
has a second GPU of the same chip, a restore onto it (the product's own call with the
driver's GPU UUID pairs, CUDA 13.1+) is tried and verified too.

`--privilege` (as root) asks what the driver's calls need on another user's process: a
holder runs as uid 65534, and the lock (then unlock) is tried from root held to
CAP_SYS_PTRACE alone, from root with no capability, and from another unprivileged uid
(`setpriv`, util-linux). The figures say which of them the driver let in.

Needs driver 570+ (CUDA 12.8: `cuCheckpointProcess*` in libcuda). Exits 2 where no driver
answers or the driver lacks the calls; changes nothing on the machine and leaves no process.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from actuator.checkpoint import CudaCheckpointer, CudaError, Remap

GiB = 1024**3
SAMPLE = 64 * 1024**2  # bytes compared at each of 8 places
PATTERN = 0x5EED1E55


def driver() -> Any:
    cuda = ctypes.CDLL("libcuda.so.1")
    check(cuda.cuInit(0), "cuInit")
    return cuda


def check(result: int, what: str) -> None:
    if result != 0:
        raise CudaError(what, result)


# -- the process that holds memory ---------------------------------------------------------


def holder(gpu: int, gib: float) -> None:
    """Allocate `gib` on `gpu`, fill it with PATTERN, say `held`, then answer `verify` lines
    on stdin until SIGTERM."""
    cuda = driver()
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), gpu), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
    size = int(gib * GiB)
    pointer = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)), "cuMemAlloc")
    words = size // 4
    check(cuda.cuMemsetD32_v2(pointer, ctypes.c_uint(PATTERN), ctypes.c_size_t(words)), "memset")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    print("held", flush=True)
    buffer = (ctypes.c_uint32 * (SAMPLE // 4))()
    for line in sys.stdin:
        if line.strip() != "verify":
            continue
        bad = 0
        for k in range(8):
            offset = (size - SAMPLE) * k // 7 // 4 * 4
            check(
                cuda.cuMemcpyDtoH_v2(
                    buffer, ctypes.c_uint64(pointer.value + offset), ctypes.c_size_t(SAMPLE)
                ),
                "cuMemcpyDtoH",
            )
            bad += sum(1 for word in buffer if word != PATTERN)
        # The restored context works: write a fresh value and read it back.
        check(cuda.cuMemsetD32_v2(pointer, ctypes.c_uint(7), ctypes.c_size_t(SAMPLE // 4)), "set")
        check(cuda.cuMemcpyDtoH_v2(buffer, pointer, ctypes.c_size_t(SAMPLE)), "cuMemcpyDtoH")
        bad += sum(1 for word in buffer if word != 7)
        check(
            cuda.cuMemsetD32_v2(pointer, ctypes.c_uint(PATTERN), ctypes.c_size_t(SAMPLE // 4)),
            "set",
        )
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        print(f"verified {bad}", flush=True)


def start(gpu: int, gib: float, as_uid: int | None = None) -> subprocess.Popen[str]:
    drop = ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups"]
    process = subprocess.Popen(
        [*(drop if as_uid is not None else []), sys.executable, __file__, "--hold", f"{gpu}:{gib}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != "held":
        process.kill()
        raise RuntimeError(f"a holder of {gib:g} GiB on GPU {gpu} did not start ({line!r})")
    return process


def verify(process: subprocess.Popen[str]) -> int:
    """Words that differ from what the process wrote (0: its memory came back whole)."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("verify\n")
    process.stdin.flush()
    answer = process.stdout.readline().split()
    if len(answer) != 2 or answer[0] != "verified":
        raise RuntimeError(f"the process did not verify its memory ({answer!r})")
    return int(answer[1])


def stop(processes: list[subprocess.Popen[Any]], grace_s: float = 20.0) -> None:
    """SIGTERM each, then SIGKILL what is left after `grace_s` (a context's teardown of tens
    of GiB takes seconds)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- the driver's checkpoint calls, on another process: the product's own -----------------


class Checkpointer(CudaCheckpointer):
    """The node's checkpointer (actuator/checkpoint.py), its lock given the rung's default."""

    def lock(self, pid: int, timeout_s: float = 10.0) -> None:
        super().lock(pid, timeout_s)


def timed(call: Any) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def gpu_view(nvml: Any, gpu: int, pid: int) -> tuple[bool, float]:
    """Whether NVML lists the PID on the GPU, and the GPU's used memory in GiB."""
    handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
    listed = any(p.pid == pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    return listed, nvml.nvmlDeviceGetMemoryInfo(handle).used / GiB


def suspend_and_resume(nvml: Any, cp: Checkpointer, gpu: int, gib: float) -> dict[str, Any]:
    process = start(gpu, gib)
    pid = process.pid
    try:
        rss_before = psutil.Process(pid).memory_info().rss / GiB
        listed, used_before = gpu_view(nvml, gpu, pid)
        row: dict[str, Any] = {"gib": gib, "listed_before": listed, "used_before_gib": used_before}
        row["lock_s"] = timed(lambda: cp.lock(pid))
        row["checkpoint_s"] = timed(lambda: cp.checkpoint(pid))
        row["state_suspended"] = cp.state(pid)
        time.sleep(1)  # NVML samples
        listed, used = gpu_view(nvml, gpu, pid)
        row |= {
            "listed_suspended": listed,
            "used_suspended_gib": used,
            "freed_share": (used_before - used) / gib,  # the rung asks for >= 0.9
            "host_rss_grew_gib": psutil.Process(pid).memory_info().rss / GiB - rss_before,
        }
        row["restore_s"] = timed(lambda: cp.restore(pid))
        row["unlock_s"] = timed(lambda: cp.unlock(pid))
        row["state_resumed"] = cp.state(pid)
        row["listed_resumed"], row["used_resumed_gib"] = gpu_view(nvml, gpu, pid)
        row["words_wrong"] = verify(process)
        return row
    finally:
        stop([process])


def restore_into_a_full_gpu(nvml: Any, cp: Checkpointer, gpu: int, gib: float) -> dict[str, Any]:
    first = start(gpu, gib)
    running = [first]
    try:
        cp.lock(first.pid)
        cp.checkpoint(first.pid)
        free = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(gpu)).free / GiB
        filler = start(gpu, max(1.0, free - gib / 2))  # leaves half the footprint free
        running.append(filler)
        row: dict[str, Any] = {"gib": gib, "filler_gib": max(1.0, free - gib / 2)}
        try:
            cp.restore(first.pid)
            row["full_restore"] = "succeeded (unexpected)"
        except CudaError as exc:
            row["full_restore"] = f"refused: CUresult {exc.code}"
        row["state_after_refusal"] = cp.state(first.pid)
        stop([filler])
        time.sleep(1)
        if row["state_after_refusal"] == "checkpointed":
            cp.restore(first.pid)
        if cp.state(first.pid) == "locked":
            cp.unlock(first.pid)
        row["state_after_room"] = cp.state(first.pid)
        row["words_wrong"] = verify(first)
        return row
    finally:
        stop(running)


def restore_onto_another_gpu(nvml: Any, cp: Checkpointer, gpu: int, gib: float) -> dict[str, Any]:
    """Checkpointed on `gpu`, restored onto another GPU of the same chip (where there is
    one), through the product's own resume; its memory compared afterwards."""
    name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(gpu))
    others = [
        i
        for i in range(nvml.nvmlDeviceGetCount())
        if i != gpu and nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)) == name
    ]
    if not others:
        return {"gib": gib, "skipped": "no second GPU of the same chip"}

    def uuid(i: int) -> str:
        found = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))
        return found.decode() if isinstance(found, bytes) else str(found)

    process = start(gpu, gib)
    try:
        cp.lock(process.pid)
        cp.checkpoint(process.pid)
        done = cp.resume(process.pid, Remap(uuid(gpu), uuid(others[0]), others[0]))
        listed, _ = gpu_view(nvml, others[0], process.pid)
        row: dict[str, Any] = {"gib": gib, "onto": others[0], "ok": done.ok, "detail": done.detail}
        row["listed_on_new_gpu"] = listed
        row["words_wrong"] = verify(process) if done.ok else None
        return row
    finally:
        stop([process])


PROBES = {
    # who asks: (setpriv options)
    "root, CAP_SYS_PTRACE only": ["--bounding-set=-all,+sys_ptrace"],
    "root, no capability": ["--bounding-set=-all"],
    "another unprivileged uid": [
        "--reuid=65533",
        "--regid=65533",
        "--clear-groups",
        "--bounding-set=-all",
    ],
}


def probe(pid: int) -> None:
    """Be the asker: the state, then a lock and an unlock of `pid`; print what the driver said."""
    cp = Checkpointer()
    said: dict[str, Any] = {"state": cp.state(pid) or "refused"}
    try:
        cp.lock(pid, 5.0)
        cp.unlock(pid)
        said["lock"] = "ok"
    except CudaError as exc:
        said["lock"] = f"refused: CUresult {exc.code}"
    print(json.dumps(said), flush=True)


def privilege(gpu: int) -> dict[str, Any]:
    """Which asker the driver lets lock a process of uid 65534."""
    holder_process = start(gpu, 1.0, as_uid=65534)
    found: dict[str, Any] = {"target_uid": 65534}
    try:
        for who, options in PROBES.items():
            asker = [sys.executable, __file__, "--probe", str(holder_process.pid)]
            command = ["setpriv", *options, *asker]
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
            last = (done.stdout.strip().splitlines() or [""])[-1]
            found[who] = json.loads(last) if last.startswith("{") else done.stderr.strip()[-300:]
        return found
    finally:
        stop([holder_process])


def run(gpu: int, sizes: list[float], *, privileged: bool = False) -> dict[str, Any]:
    import pynvml

    pynvml.nvmlInit()
    try:
        cp = Checkpointer()
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        found: dict[str, Any] = {
            "gpu": pynvml.nvmlDeviceGetName(handle),
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "runs": [],
        }
        for gib in sizes:
            free = pynvml.nvmlDeviceGetMemoryInfo(handle).free / GiB
            if gib > free - 1:
                found["runs"].append({"gib": gib, "skipped": f"{free:.1f} GiB free"})
                continue
            found["runs"].append(suspend_and_resume(pynvml, cp, gpu, gib))
            print(json.dumps(found["runs"][-1]), flush=True)
        found["full_gpu"] = restore_into_a_full_gpu(pynvml, cp, gpu, min(sizes))
        print(json.dumps(found["full_gpu"]), flush=True)
        found["other_gpu"] = restore_onto_another_gpu(pynvml, cp, gpu, min(sizes))
        print(json.dumps(found["other_gpu"]), flush=True)
        if privileged:
            found["privilege"] = privilege(gpu)
            print(json.dumps(found["privilege"]), flush=True)
        return found
    finally:
        pynvml.nvmlShutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--sizes", default="8,40", help="GiB per process, comma-separated")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    parser.add_argument(
        "--privilege",
        action="store_true",
        help="as root: which asker the driver lets checkpoint another user's process",
    )
    parser.add_argument("--hold", help=argparse.SUPPRESS)  # GPU:GIB: be the holder
    parser.add_argument("--probe", type=int, help=argparse.SUPPRESS)  # PID: be the asker
    args = parser.parse_args(argv)
    if args.probe:
        probe(args.probe)
        return 0
    if args.privilege and os.geteuid() != 0:
        parser.error("--privilege drops root's capabilities to ask as others: run it as root")
    if args.hold:
        gpu, gib = args.hold.split(":")
        holder(int(gpu), float(gib))
        return 0
    try:
        sizes = [float(size) for size in args.sizes.split(",") if size]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: GiB, comma-separated (8,40)")
    try:
        found = run(args.gpu, sizes, privileged=args.privilege)
    except (OSError, RuntimeError, CudaError) as exc:
        print(f"gpu_suspend: nothing measured: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # pynvml's errors: no driver answers
        print(f"gpu_suspend: nothing measured: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
