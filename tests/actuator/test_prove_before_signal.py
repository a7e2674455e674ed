"""What the actuator must prove before any signal (DESIGN §4), one test per class of defect
that once made it signal the wrong process or judge a working one idle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from actuator.decisions import check_idle, roll_cpu
from actuator.live import Evidence, target_of
from actuator.models import LiveState, parse_target
from actuator.node import LocalNode
from actuator.policy import Claims, Facts, Idle, Mode, Policy, Protect, resolve
from actuator.protect import Protection
from exporter import ownprocs, procfs
from exporter.sim.state import load_faults, save_faults
from exporter.thresholds import SHIPPED, load
from tests.helpers.actuator import NODE, Actuator, Workloads, alert_for, payload
from tests.helpers.cases import GUARD, LIMITS, T0, decide_live, eff, make_case, make_live
from tests.helpers.procview import stepped_proc
from tests.support import REPO, gpu_reclaimer_command, wait_until

pytestmark = pytest.mark.timeout(90)
RULES = REPO / "alert-rules" / "gpu-reclaimer.rules.yml"
BOOT = procfs.boot_id()
OPEN = Protect(protect_root=False, protected_uid_below=0)


def good_labels(**over: str) -> dict[str, str]:
    labels = {"node": "n1", "uuid": "GPU-0", "pid": "4242", "start_ticks": "1000", "boot_id": BOOT}
    labels.update(over)
    return labels


def signals(case: dict) -> list[tuple[int, str]]:
    return [(s["pid"], s["signal"]) for s in case["signals"]]


def alive(pid: int) -> bool:
    stat = procfs.read_stat(pid)
    return stat is not None and not stat.is_zombie


def python(code: str, **kw) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], **kw)


# -- 1. label parsing ---------------------------------------------------------------------


@pytest.mark.reliability(8)
@pytest.mark.parametrize(
    "pid",
    [
        "0",
        "1",
        "-1",
        "",
        "abc",
        "1e3",
        "\uff10\uff11\uff12",
        "\u00b2",
        "٤٢",
        "0042",
        "4242 ",
        str(2**22),
        str(2**31),
        str(2**64),
        "9" * 5000,
    ],
)
def test_class1_label_parsing_accepts_ascii_decimal_pids_in_range_only(pid: str) -> None:
    assert isinstance(parse_target(good_labels(pid=pid), {}, pid_max=2**22), str)


@pytest.mark.reliability(8)
def test_class1_label_parsing_bounds_every_identity_label() -> None:
    assert not isinstance(parse_target(good_labels(), {}), str)
    assert isinstance(parse_target(good_labels(pid="40000"), {}, pid_max=32768), str)
    for bad in (
        {"start_ticks": "\uff11"},
        {"start_ticks": "0"},
        {"boot_id": "not-a-boot-id"},
        {"uuid": "GPU-0\n"},
        {"node": ""},
    ):
        assert isinstance(parse_target(good_labels(**bad), {}), str), bad
    for start in ("nan", "inf", "-5", "1e400"):
        assert isinstance(parse_target(good_labels(), {"start_time": start}), str), start


@pytest.mark.reliability(8)
def test_class1_a_full_width_pid_of_a_real_process_is_refused(
    workloads: Workloads, actuator_factory
) -> None:
    actuator: Actuator = actuator_factory(workloads.node_dir)
    w = workloads.spawn()
    full_width = "".join(chr(0xFF10 + int(d)) for d in str(w.pid))
    uid_poison = alert_for(w, uid="\u00b2")
    forged = alert_for(w, pid=full_width)
    assert actuator.post(payload(forged, uid_poison)).status_code == 200
    wait_until(lambda: len(actuator.cases(state="refused")) == 2, 15)
    for case in actuator.cases(state="refused"):
        assert case["reason_code"] == "bad_target", case
    time.sleep(1)
    assert w.alive() and actuator.metric("gpu_reclaimer_signals_sent_total", signal="SIGTERM") == 0


# -- 2. who is in the tree ----------------------------------------------------------------


def test_class2_tree_a_wrapper_whose_child_holds_the_memory_is_not_on_the_gpu(
    workloads: Workloads,
) -> None:
    inner = [
        *gpu_reclaimer_command(),
        "sim",
        "run",
        "--dir",
        str(workloads.node_dir),
        "--gpu",
        "0",
        "--memory",
        "2GiB",
        "--phases",
        "idle",
        "--tick",
        "0.2",
    ]
    shell = subprocess.Popen(
        ["sh", "-c", " ".join(inner) + " & wait"], stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        node = LocalNode(NODE, OPEN, sim_dir=str(workloads.node_dir), sm_window=1.0)
        target = target_of(NODE, shell.pid, workloads.uuid(0))
        live = wait_until(lambda: (lv := node.inspect(target)).gpu_memory_bytes and lv, 15)
        assert live.on_gpu is False, "only a descendant holds memory: the shell is no target"
        d = check_idle(make_case(), live, Idle(), time.time())
        assert d is not None and d.code == "released"
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


@pytest.mark.reliability(34)
def test_class2_tree_a_child_of_another_uid_is_never_signalled(tmp_path: Path) -> None:
    parent = python(
        """
        import os, signal, subprocess, sys, time
        other = subprocess.Popen([sys.executable, "-c",
            "import os, time; os.setuid(65534); time.sleep(600)"])
        same = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(other.pid, same.pid, flush=True)
        time.sleep(600)
        """,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert parent.stdout is not None
        other_pid, same_pid = (int(x) for x in parent.stdout.readline().split())
        wait_until(lambda: (s := procfs.read_status(other_pid)) and s.uid == 65534, 10)
        node = LocalNode(NODE, OPEN, sim_dir=str(tmp_path / "none"))
        target = target_of(NODE, parent.pid, "GPU-x")
        live = node.inspect(target)
        assert {m.pid for m in live.members} == {parent.pid, same_pid}
        assert [e.pid for e in live.excluded] == [other_pid]
        assert "uid 65534" in live.excluded[0].reason
        results = node.signal_tree(target, live.members, signal.SIGTERM, dry_run=False)
        assert {r.pid for r in results if r.sent} == {parent.pid, same_pid}
        wait_until(lambda: not alive(same_pid), 10)
        time.sleep(0.3)
        assert alive(other_pid), "the other uid's process was signalled"
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


# -- 3. self-protection by identity -------------------------------------------------------


@pytest.mark.reliability(34)
def test_class3_our_processes_are_protected_by_identity_not_by_command_line(
    tmp_path: Path, sim_node: Path
) -> None:
    runtime = tmp_path / "runtime"
    env = {**os.environ, ownprocs.RUNTIME_DIR_ENV: str(runtime)}
    exporter = subprocess.Popen(
        [
            *gpu_reclaimer_command(),
            "--log-level",
            "INFO",
            "exporter",
            "--listen",
            "127.0.0.1:0",
            "--sim-dir",
            str(sim_node),
        ],
        env=env,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    impostor = python("import time; time.sleep(600)  # gpu-reclaimer exporter")
    mentions = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", "gpu-reclaimer", "exporter"]
    )
    try:
        wait_until(lambda: any(p.pid == exporter.pid for p in ownprocs.registered(runtime)), 15)
        protection = Protection(OPEN, runtime_dir=runtime)

        def reason(pid: int) -> str | None:
            stat, status = procfs.read_stat(pid), procfs.read_status(pid)
            assert stat is not None and status is not None
            return protection.reason(stat, status)

        assert reason(exporter.pid) == "a gpu-reclaimer process or its ancestor"
        assert reason(os.getpid()) is not None  # the actuator itself and its ancestors
        assert reason(impostor.pid) is None
        assert reason(mentions.pid) is None
        # A record written by another user protects nobody.
        forged = runtime / "self" / f"exporter-{mentions.pid}.json"
        stat = procfs.read_stat(mentions.pid)
        assert stat is not None
        forged.write_text(
            f'{{"role": "exporter", "pid": {mentions.pid}, "start_ticks": {stat.start_ticks},'
            f' "boot_id": "{BOOT}"}}'
        )
        os.chown(forged, 65534, 65534)
        fresh = Protection(OPEN, runtime_dir=runtime)
        assert stat is not None and fresh.reason(stat, procfs.read_status(mentions.pid)) is None
    finally:
        for proc in (exporter, impostor, mentions):
            proc.kill()
            proc.wait()


@pytest.mark.reliability(34)
def test_class3_pid_1_and_kernel_threads_are_protected() -> None:
    protection = Protection(OPEN)
    for pid in (1, 2):
        stat, status = procfs.read_stat(pid), procfs.read_status(pid)
        assert stat is not None and status is not None
        assert protection.reason(stat, status) in ("pid 1", "kernel thread")


# -- 4. policy chosen by a label ----------------------------------------------------------


def test_class4_policy_a_label_can_only_make_the_decision_safer() -> None:
    policy = Policy.model_validate(
        {
            "mode": "observe",
            "projects": [
                {"name": "vision", "match": {"labels": ["vision"]}, "mode": "enforce"},
                {"name": "serving", "match": {"namespaces": ["serving"]}, "protected": True},
                {"name": "alice", "match": {"users": ["alice"]}, "mode": "enforce"},
            ],
        }
    )
    forged = resolve(policy, Facts(user="mallory"), Claims(project="vision"))
    assert forged.mode == Mode.OBSERVE, "a forged project label selected enforcement"
    shielded = resolve(policy, Facts(user="alice"), Claims(namespace="serving"))
    assert shielded.protected and "made safer by projects #2 (serving)" in shielded.rule
    assert resolve(policy, Facts(user="alice")).mode == Mode.ENFORCE
    # The node's own facts do select the rule: the pod's namespace from the cgroup.
    assert resolve(policy, Facts(user="x", namespace="serving")).protected


def test_class4_policy_a_forged_project_label_gets_no_sigterm(
    workloads: Workloads, actuator_factory
) -> None:
    actuator: Actuator = actuator_factory(
        workloads.node_dir,
        mode="observe",
        projects=[{"name": "vision", "match": {"labels": ["vision"]}, "mode": "enforce"}],
    )
    w = workloads.spawn()
    actuator.post(payload(alert_for(w, project="vision")))
    case = actuator.wait_state(w, "observed", "reclaimed", "terminating", "refused", "cancelled")
    assert case["state"] == "observed" and signals(case) == [] and w.alive(), case


# -- 5. two cases, one process ------------------------------------------------------------


@pytest.mark.reliability(1)
def test_class5_dedup_two_alerts_for_one_process_make_one_case(
    workloads: Workloads, actuator_factory
) -> None:
    actuator: Actuator = actuator_factory(workloads.node_dir)
    w = workloads.spawn(memory="2GiB")
    first = alert_for(w, start_time=w.start_time)
    second = alert_for(w, start_time=w.start_time + 0.5, starts_at=time.time() - 1)
    assert actuator.post(payload(first, second)).status_code == 200
    case = actuator.wait_state(w, "reclaimed", "failed", "refused", "cancelled")
    assert case["state"] == "reclaimed", case
    assert len(actuator.cases(limit=1000)) == 1
    assert signals(case) == [(w.pid, "SIGTERM")]
    assert case["freed_bytes"] == 2 * 1024**3


# -- 6. identity after a clock step -------------------------------------------------------


@pytest.mark.reliability(42)
def test_class6_identity_survives_a_wall_clock_step(workloads: Workloads, tmp_path: Path) -> None:
    w = workloads.spawn()
    target = target_of(NODE, w.pid, w.uuid)  # as the exporter saw it before the step
    stepped = stepped_proc(tmp_path)
    node = LocalNode(
        NODE, OPEN, sim_dir=str(workloads.node_dir), evidence=Evidence(proc_root=stepped)
    )
    live = node.inspect(target)
    assert live.start_ticks == target.start_ticks and live.boot_id == target.boot_id
    assert live.start_time is not None and abs(live.start_time - target.start_time - 3600) < 1
    case = replace(
        make_case(pid=w.pid, uid=live.uid),
        start_ticks=target.start_ticks,
        boot_id=target.boot_id,
        uuid=w.uuid,
    )
    d = decide_live(case, live, eff(), Idle(cpu_window=1.0), LIMITS, GUARD, time.time())
    assert d.code != "identity_mismatch", d


# -- 7. "no sample" read as idle ----------------------------------------------------------


@pytest.mark.reliability(15, 19)
def test_class7_no_sample_is_unknown_when_the_sample_join_fails(
    workloads: Workloads, actuator_factory
) -> None:
    actuator: Actuator = actuator_factory(workloads.node_dir)
    w = workloads.spawn(phases="busy")
    node = LocalNode(NODE, OPEN, sim_dir=str(workloads.node_dir), sm_window=1.0)
    target = target_of(NODE, w.pid, w.uuid)
    assert wait_until(lambda: (node.inspect(target).sm_util or 0) > 0.5, 10)
    # Samples now name PIDs of another namespace: the busy job has "no sample".
    save_faults(
        workloads.node_dir,
        replace(load_faults(workloads.node_dir), util_pid_offsets=((0, 100000),)),
    )
    time.sleep(0.5)
    live = node.inspect(target)
    assert live.sm_util is None and live.util_unknown == "pid_mismatch"
    actuator.post(payload(alert_for(w)))
    case = actuator.wait_state(w, "refused", "notified", "terminating", "reclaimed", "cancelled")
    assert case["state"] == "refused" and case["reason_code"] == "unknown_evidence", case
    assert "pid_mismatch" in case["reason"] and signals(case) == [] and w.alive()


# -- 8. the re-check sees what the rule saw -----------------------------------------------


@pytest.mark.reliability(24)
def test_class8_recheck_a_stalled_alert_against_fresh_heartbeats_is_cancelled(
    workloads: Workloads, actuator_factory, tmp_path: Path
) -> None:
    beats = tmp_path / "heartbeats"
    actuator: Actuator = actuator_factory(
        workloads.node_dir, node={"heartbeat_dir": str(beats)}, idle={"log_quiet_for": "5s"}
    )
    w = workloads.spawn("--heartbeat", "--heartbeat-dir", str(beats), phases="busy")
    wait_until(lambda: any(beats.iterdir()), 10)
    actuator.post(payload(alert_for(w, alertname="GpuProcessStalled")))
    case = actuator.wait_state(w, "cancelled", "notified", "terminating", "reclaimed", "refused")
    assert case["state"] == "cancelled" and "heartbeat written" in case["reason"], case
    assert signals(case) == [] and w.alive()


def test_class8_recheck_reads_the_configured_log_globs(
    workloads: Workloads, actuator_factory, tmp_path: Path
) -> None:
    logs = tmp_path / "runs"
    logs.mkdir()
    actuator: Actuator = actuator_factory(
        workloads.node_dir, node={"log_globs": [f"{logs}/*.log"]}, idle={"log_quiet_for": "5s"}
    )
    w = workloads.spawn("--log", str(logs / "train.log"), phases="busy")
    wait_until(lambda: (logs / "train.log").exists() and (logs / "train.log").stat().st_size, 10)
    actuator.post(payload(alert_for(w, alertname="GpuProcessStalled")))
    case = actuator.wait_state(w, "cancelled", "notified", "terminating", "reclaimed", "refused")
    assert case["state"] == "cancelled" and "log written" in case["reason"], case
    assert w.alive()


def test_class8_recheck_a_stalled_alert_without_heartbeat_or_log_is_unknown() -> None:
    case = make_case(alertname="GpuProcessStalled")
    d = decide_live(case, make_live(sm_util=1.0), eff(), Idle(), LIMITS, GUARD, T0)
    assert d.code == "unknown_evidence" and "no heartbeat or log" in d.reason


# -- 9. thresholds that disagree ----------------------------------------------------------


def test_class9_thresholds_the_shipped_rules_and_the_actuator_agree() -> None:
    assert load(RULES) == SHIPPED
    assert not {"max_sm_util", "max_cpu_cores", "memory_growth_bytes"} & Idle.model_fields.keys()


def test_class9_thresholds_a_tree_the_rules_call_idle_is_not_cancelled_for_cpu() -> None:
    # 0.07 cores: under the rules' 0.1 core, so flagged; the re-check must not cancel it.
    case = make_case(cpu_seconds=10.0, cpu_at=T0 - 10)
    live: LiveState = make_live(cpu_seconds=10.7)
    problem, updates = roll_cpu(case, live, Idle(cpu_window=1.0))
    assert problem is None and updates["cpu_rate"] == pytest.approx(0.07)
    tuned = replace(SHIPPED, max_cpu_cores=0.05)
    problem, _ = roll_cpu(case, live, Idle(cpu_window=1.0), tuned)
    assert problem is not None and problem.code == "activity"


def test_class9_thresholds_come_from_the_configured_rules_file(tmp_path: Path) -> None:
    tuned = tmp_path / "rules.yml"
    tuned.write_text(RULES.read_text().replace("rate_window <= 0.1", "rate_window <= 0.25"))
    assert load(tuned).max_cpu_cores == 0.25
    tuned.write_text("groups: []\n")
    with pytest.raises(ValueError, match="expected one value for max_sm_util"):
        load(tuned)
