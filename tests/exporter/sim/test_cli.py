"""`gpu-reclaimer sim ...` as a user types it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from exporter.sim.state import load_faults, load_node, read_procs
from tests.support import GiB, gpu_reclaimer, gpu_reclaimer_command


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return gpu_reclaimer("sim", *args)


def test_init_fault_and_status(tmp_path: Path) -> None:
    node = tmp_path / "node"
    assert sim("init", str(node), "--gpus", "4", "--memory", "40GiB").returncode == 0
    gpus = load_node(node).gpus
    assert [g.index for g in gpus] == [0, 1, 2, 3] and gpus[0].memory_total == 40 * GiB
    assert len({g.uuid for g in gpus}) == 4
    result = sim(
        "fault",
        str(node),
        "--lose-gpu",
        "2",
        "--no-process-util",
        "1",
        "--ghost",
        "0:4000000:1GiB",
        "--hang",
        "nvmlDeviceGetCount",
        "--hang-seconds",
        "5",
        "--nvml-missing",
        "on",
        "--leak",
        "on",
    )
    assert result.returncode == 0, result.stderr
    faults = load_faults(node)
    assert faults.lost_gpus == (2,) and faults.process_util_unsupported == (1,)
    assert faults.ghost_pids == ((0, 4_000_000, GiB),) and faults.nvml_missing
    assert faults.hang_call == "nvmlDeviceGetCount" and faults.hang_seconds == 5
    assert load_node(node).leak_on_exit
    assert sim("fault", str(node), "--restore-gpu", "2").returncode == 0
    assert load_faults(node).lost_gpus == ()
    assert sim("fault", str(node), "--clear").returncode == 0
    assert load_faults(node).nvml_missing is False
    status = sim("status", str(node))
    assert status.returncode == 0 and "GPU 3" in status.stdout


def test_clear_errors_for_bad_input(tmp_path: Path) -> None:
    missing = sim(
        "run", "--dir", str(tmp_path / "nope"), "--gpu", "0", "--memory", "1GiB", "--phases", "idle"
    )
    assert missing.returncode != 0 and "sim init" in missing.stderr
    node = tmp_path / "node"
    sim("init", str(node), "--gpus", "1")
    bad_gpu = sim("run", "--dir", str(node), "--gpu", "3", "--memory", "1GiB", "--phases", "idle")
    assert bad_gpu.returncode != 0 and "GPUs 0..0" in bad_gpu.stderr
    bad_phase = sim(
        "run", "--dir", str(node), "--gpu", "0", "--memory", "1GiB", "--phases", "nap=1s,idle"
    )
    assert bad_phase.returncode != 0 and "unknown phase" in bad_phase.stderr
    bad_size = sim("run", "--dir", str(node), "--gpu", "0", "--memory", "lots", "--phases", "idle")
    assert bad_size.returncode != 0 and "invalid size" in bad_size.stderr


def test_user_mistakes_are_messages_not_tracebacks(tmp_path: Path) -> None:
    node = tmp_path / "node"
    absent = str(tmp_path / "absent")
    assert sim("init", str(node), "--gpus", "2", "--memory", "80GiB").returncode == 0
    cases = [
        (("init", str(tmp_path / "zero"), "--gpus", "0"), "must be at least 1"),
        (("status", absent), "gpu-reclaimer sim status: error: "),
        (("fault", absent, "--lose-gpu", "0"), "gpu-reclaimer sim fault: error: "),
        (("fault", str(node), "--lose-gpu", "9"), "--lose-gpu 9: the node has GPUs 0..1"),
        (("fault", str(node), "--ghost", "5:4000000:1GiB"), "--ghost 5"),
        (
            ("run", "--dir", str(node), "--gpu", "0", "--memory", "200GiB", "--phases", "idle"),
            "does not fit GPU 0 (80.0 GiB)",
        ),
        (
            (
                "run",
                "--dir",
                str(node),
                "--gpu",
                "0",
                "--memory",
                "1GiB",
                "--phases",
                "idle",
                "--module",
                "not a module",
            ),
            "not a Python module name",
        ),
        (
            (
                "run",
                "--dir",
                str(node),
                "--gpu",
                "0",
                "--memory",
                "1GiB",
                "--phases",
                "idle",
                "--user",
                "no-such-account-here",
            ),
            "--user no-such-account-here: no such account",
        ),
    ]
    for args, message in cases:
        done = sim(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    assert load_faults(node).lost_gpus == ()  # a refused fault changed nothing
    assert "100 %," in sim("run", "--help").stdout  # no doubled percent sign


def test_a_dotted_module_runs_as_python_m(tmp_path: Path) -> None:
    node = tmp_path / "node"
    sim("init", str(node), "--gpus", "1")
    child = subprocess.Popen(
        [
            *gpu_reclaimer_command(),
            "sim",
            "run",
            "--dir",
            str(node),
            "--gpu",
            "0",
            "--memory",
            "1GiB",
            "--phases",
            "idle",
            "--module",
            "tensorboard.main",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        import psutil

        from tests.support import wait_until

        wait_until(
            lambda: (
                psutil.Process(child.pid).cmdline()[1:3] == ["-m", "tensorboard.main"]
                and read_procs(node)
            ),
            timeout=20,
        )
        assert child.poll() is None
    finally:
        child.kill()
        child.wait(timeout=10)


def test_a_workload_runs_as_another_account_once_started() -> None:
    """`--user` (root): the interpreter starts as root (its files may be closed to others),
    then the process is that account's, as /proc sees it, and still reports its memory."""
    import os
    import shutil
    import tempfile

    import psutil

    from tests.support import wait_until

    assert os.geteuid() == 0, "the tests run as root (they start slapd, slurmd, ...)"
    base = Path(tempfile.mkdtemp(prefix="sim-user-"))  # outside pytest's root-only folder
    try:
        base.chmod(0o755)
        node = base / "node"
        assert sim("init", str(node), "--gpus", "1").returncode == 0
        (node / "procs").chmod(0o1777)
        args = ["--dir", str(node), "--gpu", "0", "--memory", "1GiB", "--phases", "idle"]
        args += ["--name", "python", "--user", "nobody"]
        child = subprocess.Popen(
            [*gpu_reclaimer_command(), "sim", "run", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until(lambda: [p for p in read_procs(node) if p.pid == child.pid], timeout=20)
            assert psutil.Process(child.pid).uids().real == 65534
            assert psutil.Process(child.pid).name() == "python"
        finally:
            child.kill()
            child.wait(timeout=10)
    finally:
        shutil.rmtree(base)


def test_a_workload_never_rewrites_the_launcher_another_is_starting_from(
    tmp_path: Path,
) -> None:
    """Jobs started together each write the `--name` launcher while another may be exec'ing
    it, and Linux refuses to write a file being exec'd (ETXTBSY: the job died at start). So a
    start puts a new file in place and leaves the old one, that a start may hold, untouched."""
    import os

    node = tmp_path / "node"
    sim("init", str(node), "--gpus", "1")
    args = ["run", "--dir", str(node), "--gpu", "0", "--memory", "1GiB", "--name", "python"]
    assert sim(*args, "--phases", "busy=0.1s,done").returncode == 0
    launcher = node / "bin" / "python"
    held = os.open(launcher, os.O_RDONLY)  # as an exec in progress holds it
    try:
        before = os.fstat(held)
        assert sim(*args, "--phases", "busy=0.1s,done").returncode == 0
        assert os.stat(launcher).st_ino != before.st_ino  # a new file, renamed into place
        assert os.fstat(held).st_mtime_ns == before.st_mtime_ns  # the held one not rewritten
        assert os.access(launcher, os.X_OK) and launcher.read_text().startswith("#!")
        assert not [p.name for p in launcher.parent.iterdir() if p.name.startswith(".tmp-")]
    finally:
        os.close(held)


def test_faults_are_said_in_words_and_a_call_it_does_not_answer_is_refused(
    tmp_path: Path,
) -> None:
    """Issue 60: `sim fault` and `sim status` printed a Python object; `--hang nvmlBogus` was
    accepted (and hung nothing)."""
    node = tmp_path / "node"
    assert sim("init", str(node), "--gpus", "2").returncode == 0
    said = sim("fault", str(node), "--lose-gpu", "1", "--hang", "nvmlDeviceGetCount")
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == "faults: GPU 1 lost; nvmlDeviceGetCount blocks for 1h"
    assert "Faults(" not in sim("status", str(node)).stdout
    bogus = sim("fault", str(node), "--hang", "nvmlBogus")
    assert bogus.returncode == 2 and "not an NVML call the simulation answers" in bogus.stderr
    assert "nvmlDeviceGetCount" in bogus.stderr and "Traceback" not in bogus.stderr
    assert sim("fault", str(node), "--clear").stdout.strip() == "faults: none"
    helped = sim("fault", "--help").stdout
    assert "GPU_IS_LOST" in helped and "answers again" in helped


def test_a_port_in_use_and_a_missing_trace_are_one_line_each(tmp_path: Path) -> None:
    """Issue 60: `sim run --serve` on a port in use, `replay-requests` on a missing trace:
    tracebacks, or the machinery's '[Errno 2]'."""
    import socket

    node = tmp_path / "node"
    assert sim("init", str(node), "--gpus", "1").returncode == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = sim(
            "run", "--dir", str(node), "--gpu", "0", "--memory", "1GiB", "--phases", "idle",
            "--serve", port,
        )  # fmt: skip
    assert busy.returncode == 2, busy.stderr
    assert f"--serve: cannot listen on 127.0.0.1:{port}: Address already in use" in busy.stderr
    assert "Traceback" not in busy.stderr
    missing = sim("replay-requests", str(tmp_path / "nope.csv"), "--url", "http://127.0.0.1:1")
    assert missing.returncode == 2
    assert "cannot read the trace" in missing.stderr and "No such file" in missing.stderr
    assert "Errno" not in missing.stderr and "Traceback" not in missing.stderr
