"""The Slurm client (actuator/schedulers/slurm_cli.py) against scripted `scontrol` and
`scancel` executables that print what Slurm prints and log how they were called: a job's
fields, pending jobs and their nodes, free GPUs per node, and every failure as a SlurmError
(unknown), never as a guess. The real slurmctld is tests/slurm/."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from actuator.schedulers.slurm_cli import JobCache, SlurmCli, SlurmError, SlurmJob, parse_fields

JOB_42 = (
    "JobId=42 JobName=train UserId=alice(1001) GroupId=alice(1001) Priority=1 "
    "Account=vision JobState=RUNNING Reason=None Partition=gpu NodeList=gpu-[01-02] "
    "TresPerNode=gres/gpu:2"
)
PENDING = (
    "JobId=43 UserId=bob(1002) JobState=PENDING Reason=Resources Partition=gpu "
    "ReqNodeList=(null) NumNodes=1 TresPerNode=gres/gpu:1 SubmitTime=2026-12-01T09:00:00\n"
    "JobId=44 UserId=carol(1003) JobState=PENDING Reason=Priority Partition=gpu "
    "ReqNodeList=gpu-03 NumNodes=1-1 TresPerJob=gres/gpu:4 SubmitTime=2026-12-01T09:05:00\n"
    "JobId=45 UserId=dan(1004) JobState=PENDING Reason=Resources Partition=gpu,long "
    "ReqNodeList=(null) NumNodes=1 TresPerNode=gres/gpu:1 SubmitTime=2026-12-01T09:06:00\n"
    + JOB_42
    + "\n"
)
NODES = (
    "NodeName=gpu-01 State=MIXED Gres=gpu:h100:4(S:0-1) GresUsed=gpu:h100:3(IDX:0-2)\n"
    "NodeName=gpu-02 State=IDLE+DRAIN Gres=gpu:h100:4(S:0-1) GresUsed=gpu:h100:0(IDX:N/A)\n"
    "NodeName=gpu-03 State=IDLE Gres=gpu:8 GresUsed=gpu:0(IDX:N/A)\n"
)


def _tool(path: Path, script: str) -> str:
    """An executable that logs its arguments next to itself, then runs `script` (sh)."""
    path.write_text(f'#!/bin/sh\necho "$*" >> "{path}.calls"\n{script}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _calls(tool: str) -> list[str]:
    calls = Path(tool + ".calls")
    return calls.read_text().splitlines() if calls.exists() else []


SCONTROL = f"""case "$*" in
  "-o show job 42") echo '{JOB_42}' ;;
  "-o show job 404") echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1 ;;
  "-o show job 500") echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2
                     exit 1 ;;
  "-o show job 7") echo 'JobId=8 JobState=RUNNING' ;;
  "-o show job") printf '%s' '{PENDING}' ;;
  "show hostnames gpu-[01-02]") printf 'gpu-01\\ngpu-02\\n' ;;
  "-o show partition gpu") echo 'PartitionName=gpu Nodes=gpu-01,gpu-03 State=UP' ;;
  "-o show partition long") echo 'PartitionName=long Nodes=gpu-03,gpu-04 State=UP' ;;
  "-o -d show node") printf '%s' '{NODES}' ;;
  "-o -d show node gpu-01") printf '%s' '{NODES.splitlines()[0]}' ;;
  "-o -d show node gpu-09") echo 'NodeName=gpu-01 GresUsed=gpu:0' ;;
  "-o -d show node gpu-10") echo 'NodeName=gpu-10 State=IDLE' ;;
  *) echo "unexpected: $*" >&2; exit 3 ;;
esac"""


@pytest.fixture
def slurm(tmp_path: Path) -> SlurmCli:
    scontrol = _tool(tmp_path / "scontrol", SCONTROL)
    scancel = _tool(
        tmp_path / "scancel", 'case "$*" in *13*) echo "no such job" >&2; exit 1;; esac'
    )
    return SlurmCli(scontrol, scancel)


def test_a_job_is_read_with_its_owner_and_nodes(slurm: SlurmCli) -> None:
    assert slurm.job("42") == SlurmJob(
        id="42",
        state="RUNNING",
        uid=1001,
        user="alice",
        partition="gpu",
        account="vision",
        nodes=("gpu-01", "gpu-02"),
    )
    assert slurm.job("404") is None  # the scheduler does not know it
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        slurm.job("500")
    with pytest.raises(SlurmError, match="unexpected answer"):
        slurm.job("7")  # an answer about another job is not this job's


def test_pending_jobs_with_the_nodes_they_may_run_on(slurm: SlurmCli) -> None:
    first, second, third = slurm.pending_jobs()
    assert (first.id, first.user, first.reason, first.gpus_per_node) == (
        "43",
        "bob",
        "Resources",
        1,
    )
    assert first.nodes == ("gpu-01", "gpu-03")  # its partition's
    assert first.submitted == "2026-12-01T09:00:00"
    assert (second.id, second.gpus_per_node, second.nodes) == ("44", 4, ("gpu-03",))
    # Two partitions (`-p gpu,long`): each read once, their nodes together, each once.
    assert third.nodes == ("gpu-01", "gpu-03", "gpu-04")
    shown = [c for c in _calls(slurm.scontrol) if "partition" in c]
    assert shown == ["-o show partition gpu", "-o show partition long"]


def test_free_gpus_count_what_no_job_holds_on_nodes_that_take_jobs(slurm: SlurmCli) -> None:
    assert slurm.free_gpus() == {"gpu-01": 1, "gpu-03": 8}  # gpu-02 drains: it takes no job


def test_gpus_allocated_are_read_for_the_node_asked_about_or_unknown(
    slurm: SlurmCli, tmp_path: Path
) -> None:
    assert slurm.gpus_allocated("gpu-01") == 3
    assert slurm.gpus_allocated("gpu-09") is None  # an answer about another node
    assert slurm.gpus_allocated("gpu-10") is None  # no GresUsed: not "none in use"
    assert slurm.gpus_allocated("gpu-11") is None  # scontrol failed
    assert SlurmCli(str(tmp_path / "absent")).gpus_allocated("gpu-01") is None


def test_cancel_asks_scancel_and_refuses_what_is_not_a_job_id(slurm: SlurmCli) -> None:
    assert slurm.cancel("42") == (True, "scancel accepted")
    assert slurm.cancel("42", signal="KILL") == (True, "scancel accepted")
    assert slurm.cancel("13") == (False, "scancel: no such job")
    assert slurm.cancel("42; rm -rf /") == (False, "not a job id")
    assert _calls(slurm.scancel) == ["42", "--signal KILL --full 42", "13"]


def test_a_missing_or_slow_scontrol_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="No such file"):
        SlurmCli(str(tmp_path / "absent")).pending_jobs()
    slow = SlurmCli(_tool(tmp_path / "slow", "sleep 5"), timeout=0.2)
    with pytest.raises(SlurmError, match="timed out"):
        slow.free_gpus()


def test_jobs_are_read_once_per_ttl_unless_asked_fresh() -> None:
    now, reads = [0.0], []

    def read(job_id: str) -> SlurmJob | None:
        reads.append(job_id)
        return None

    cache = JobCache(5.0, lambda: now[0])
    for _ in range(3):
        cache.job("42", read)
    assert reads == ["42"]
    cache.job("42", read, fresh=True)
    now[0] = 5.0
    cache.job("42", read)
    cache.forget("42")
    cache.job("42", read)
    assert reads == ["42"] * 4
    assert cache.job("4 2", read) is None and cache.job("", read) is None
    assert reads == ["42"] * 4  # what is not a job id is never asked about


def test_fields_as_scontrol_prints_them() -> None:
    fields = parse_fields("JobId=42 Comment=a=b UserId=alice(1001) Features=(null) Gres/gpu=1")
    assert fields == {
        "JobId": "42",
        "Comment": "a=b",
        "UserId": "alice(1001)",
        "Features": "(null)",
        "Gres/gpu": "1",
    }
