"""The Slurm job of a process (exporter/slurm.py): the cgroup that only root and slurmd can
place a process in, else `SLURM_JOB_ID` from the environment, but only from a task of a
root-owned slurmstepd. A process that merely claims a job is attributed to none."""

from __future__ import annotations

from pathlib import Path

from exporter.slurm import environ_job, slurm_job_of, under_slurmstepd
from tests.helpers.procview import fake_process_entry

JOB_CGROUP = "0::/system.slice/slurmstepd.scope/job_4567/step_0/user/task_0\n"


def test_the_job_cgroup_names_the_job_whatever_the_environment_claims(tmp_path: Path) -> None:
    fake_process_entry(tmp_path, 300, cgroup=JOB_CGROUP, environ={"SLURM_JOB_ID": "999"})
    assert slurm_job_of(300, tmp_path) == "4567"


def test_a_task_of_a_root_slurmstepd_is_known_by_its_environment(tmp_path: Path) -> None:
    fake_process_entry(tmp_path, 100, comm="slurmstepd", uid=0)
    fake_process_entry(tmp_path, 200, ppid=100, comm="bash", uid=1000)
    fake_process_entry(tmp_path, 300, ppid=200, uid=1000, environ={"SLURM_JOB_ID": "42"})
    assert under_slurmstepd(300, tmp_path)
    assert slurm_job_of(300, tmp_path) == "42"


def test_a_claimed_job_without_a_root_slurmstepd_above_is_no_job(tmp_path: Path) -> None:
    claim = {"SLURM_JOB_ID": "42"}
    fake_process_entry(tmp_path, 300, uid=1000, environ=claim)  # started by init: a login
    assert slurm_job_of(300, tmp_path) == ""
    # A process the user named slurmstepd, running as the user, proves nothing.
    fake_process_entry(tmp_path, 400, comm="slurmstepd", uid=1000)
    fake_process_entry(tmp_path, 500, ppid=400, uid=1000, environ=claim)
    assert not under_slurmstepd(500, tmp_path)
    assert slurm_job_of(500, tmp_path) == ""


def test_a_broken_or_looping_parentage_ends_the_walk(tmp_path: Path) -> None:
    fake_process_entry(tmp_path, 300, ppid=301, environ={"SLURM_JOB_ID": "42"})
    assert slurm_job_of(300, tmp_path) == ""  # the parent is gone
    fake_process_entry(tmp_path, 10, ppid=11)
    fake_process_entry(tmp_path, 11, ppid=10)  # a loop no real /proc shows, bounded anyway
    assert not under_slurmstepd(10, tmp_path)


def test_only_a_whole_slurm_job_id_variable_counts(tmp_path: Path) -> None:
    cases = {
        1: ({"SLURM_JOB_ID": "42"}, "42"),
        2: ({"PATH": "/bin", "SLURM_JOB_ID": "7", "HOME": "/"}, "7"),
        3: ({"MY_SLURM_JOB_ID": "42"}, ""),  # another variable's name ends in it
        4: ({"SLURM_JOB_ID": "42x"}, ""),  # not a number
        5: ({"SLURM_JOB_ID": "1" * 13}, ""),  # longer than any job id
        6: ({}, ""),
    }
    for pid, (environ, _) in cases.items():
        fake_process_entry(tmp_path, pid, environ=environ)
    assert {pid: environ_job(pid, tmp_path) for pid in cases} == {
        pid: job for pid, (_, job) in cases.items()
    }
    assert environ_job(99, tmp_path) == ""  # no such process
