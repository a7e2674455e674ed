"""Which Slurm job a process is a task of: the cgroup, else the environment only under a
root slurmstepd; and the scheduler's answers parsed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from actuator.schedulers.slurm_cli import parse_fields
from exporter.cgroup import parse_cgroup
from exporter.slurm import environ_job, slurm_job_of
from tests.support import wait_until


def test_a_process_that_sets_slurm_job_id_itself_is_no_job_s_task() -> None:
    forged = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        env={**os.environ, "SLURM_JOB_ID": "4242"},
    )
    try:
        # It says so (once exec'd: before that /proc shows the forked parent's environment) ...
        wait_until(lambda: environ_job(forged.pid) == "4242", 10)
        assert slurm_job_of(forged.pid) == ""  # ... but no slurmstepd started it
    finally:
        forged.kill()
        forged.wait()


def test_both_cgroup_layouts_name_the_job() -> None:
    v1 = "7:memory:/slurm/uid_1000/job_123/step_0/task_0\n"
    v2 = "0::/system.slice/slurmstepd.scope/job_456/step_batch/user/task_0\n"
    assert parse_cgroup(v1).slurm_job == "123"
    assert parse_cgroup(v2).slurm_job == "456"
    assert slurm_job_of(os.getpid(), Path("/proc"), cgroup_job="789") == "789"


def test_scontrol_one_line_answers_are_parsed() -> None:
    line = (
        "JobId=17 JobName=wrap UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A "
        "Priority=1 JobState=RUNNING Reason=None Partition=gpu Account=vision "
        "NodeList=gpu-[01-02] AllocTRES=cpu=2,gres/gpu=2"
    )
    fields = parse_fields(line)
    assert fields["JobState"] == "RUNNING" and fields["UserId"] == "alice(1001)"
    assert fields["Partition"] == "gpu" and fields["NodeList"] == "gpu-[01-02]"
    assert fields["AllocTRES"] == "cpu=2,gres/gpu=2"
