"""Slurm jobs: reclaimed whole through scancel, once every rank is idle."""

from __future__ import annotations

from actuator.audit_records import SlurmCancel, SlurmVerified
from actuator.config import SlurmSettings
from actuator.fleet.directory import NodeDirectory
from actuator.ladder import Verb
from actuator.models import Case, CaseUpdate, LiveState, Reason, State, Target
from actuator.node import NodeUnreachable
from actuator.schedulers.base import Step, Why
from actuator.schedulers.slurm_cli import SlurmApi, SlurmError
from actuator.store import Store


class SlurmJobs:
    """A job is reclaimed whole, only once every rank (each GPU process of the job, on
    every node it spans) is confirmed idle by its own case; one busy rank keeps it."""

    hold = Reason.SLURM_JOB_BUSY

    def __init__(
        self, cli: SlurmApi, settings: SlurmSettings, nodes: NodeDirectory, store: Store
    ) -> None:
        self.cli, self.settings, self.nodes, self.store = cli, settings, nodes, store

    def applies(self, live: LiveState) -> bool:
        return bool(live.slurm_job) and self.settings.action == "cancel"

    def not_ready(self, case: Case, live: LiveState) -> Why | None:
        job_id, settings = live.slurm_job, self.settings
        try:
            job = self.cli.job(job_id)
        except SlurmError as exc:
            return self.hold, f"Slurm cannot be asked about job {job_id}: {exc}"
        if job is None:
            return Reason.UNKNOWN_EVIDENCE, f"Slurm does not know job {job_id}"
        if job.state != "RUNNING":
            return self.hold, f"Slurm job {job_id} is {job.state}, not RUNNING"
        if job.uid is None or live.uid is None:  # unknown owner: never cancel on it
            return Reason.UNKNOWN_EVIDENCE, f"the owner of Slurm job {job_id} is unknown"
        if job.uid != live.uid:
            return Reason.IDENTITY_MISMATCH, (
                f"Slurm job {job_id} belongs to uid {job.uid}, the process to uid {live.uid}"
            )
        if job.partition in settings.exclude_partitions or job.account in settings.exclude_accounts:
            return Reason.PROTECTED, (
                f"Slurm job {job_id}: partition {job.partition!r} / account {job.account!r} "
                "is excluded"
            )
        if case.node not in job.nodes:
            return Reason.IDENTITY_MISMATCH, f"Slurm job {job_id} does not run on {case.node}"
        for node_name in job.nodes:
            why = self._ranks_idle(case, job_id, node_name)
            if why is not None:
                return why
        return None

    def _ranks_idle(self, case: Case, job_id: str, node_name: str) -> Why | None:
        node = self.nodes.get(node_name)
        if node is None:
            return self.hold, f"job {job_id} spans {node_name}, which has no agent"
        try:
            ranks = node.job_processes(job_id)
        except NodeUnreachable as exc:
            return self.hold, f"job {job_id}: {node_name} did not answer: {exc}"
        if ranks is None:
            return self.hold, f"job {job_id}: {node_name} cannot list its ranks"
        for rank in ranks:
            if rank.key != case.target.key and not self._confirmed(rank):
                return self.hold, (
                    f"job {job_id}: rank pid {rank.pid} on {node_name} is not confirmed "
                    "idle: the job is kept"
                )
        return None

    def _confirmed(self, rank: Target) -> bool:
        other = self.store.live_case_for(rank)
        return (
            other is not None
            and other.notified_mono is not None
            and (
                other.state in (State.NOTIFIED, State.TERMINATING, State.KILLING)
                or other.reason_code == self.hold
            )
        )

    def claim(self, case: Case, live: LiveState) -> CaseUpdate:
        return CaseUpdate(slurm_job=live.slurm_job)

    def owner(self, case: Case, live: LiveState) -> dict[str, str] | None:
        return None  # the job's user is the process's user (checked by uid)

    def keep_asked(self, live: LiveState) -> str | None:
        return None  # a job asks in its environment (GPU_RECLAIMER_KEEP), like any process

    def facts(self, live: LiveState) -> dict[str, str]:
        """The job's partition and account (cached), for `match.partitions`/`accounts`,
        whatever the action: only of a job of the process's own uid; unknown (Slurm away)
        matches nothing, and the SIGTERM step is held until Slurm answers."""
        if not live.slurm_job:
            return {}
        try:
            job = self.cli.job(live.slurm_job)
        except SlurmError:
            return {}
        if job is None or job.uid is None or job.uid != live.uid:
            return {}
        return {"partition": job.partition, "account": job.account}

    def owns(self, case: Case) -> bool:
        return case.slurm_job is not None and self.settings.action == "cancel"

    def reclaim(self, case: Case, verb: Verb, *, dry_run: bool = False) -> Step:
        assert case.slurm_job is not None
        kill = verb == Verb.FORCE
        name, sig = ("SCANCEL-KILL", "KILL") if kill else ("SCANCEL", None)
        if dry_run:
            return Step(
                name,
                True,
                f"would cancel Slurm job {case.slurm_job}" + (" with SIGKILL" if kill else ""),
                SlurmCancel(job=case.slurm_job, signal=sig, dry_run=True),
            )
        try:
            ok, detail = self.cli.cancel(case.slurm_job, signal=sig)
        except SlurmError as exc:
            ok, detail = False, str(exc)
        return Step(name, ok, detail, SlurmCancel(job=case.slurm_job, signal=sig))

    def verify(self, case: Case) -> SlurmVerified:
        """The job as the scheduler sees it after the reclaim, and the GPUs it counts."""
        assert case.slurm_job is not None
        try:
            job = self.cli.job(case.slurm_job, fresh=True)
            gpus = {n: self.cli.gpus_allocated(n) for n in (job.nodes if job else ())}
            state = job.state if job else "unknown"
            return SlurmVerified(job=case.slurm_job, state=state, gpus_allocated=gpus)
        except SlurmError as exc:
            return SlurmVerified(job=case.slurm_job, state="unknown", error=str(exc))
