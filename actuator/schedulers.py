"""Processes a scheduler owns are reclaimed through it: Slurm jobs, Kubernetes pods.

Killing one PID of a Slurm job leaves the allocation held; killing a pod's process makes
the kubelet restart it or keeps the GPU bound. A `Scheduler` therefore

- gates the escalation's SIGTERM step (and the way back to it from its own hold): the
  scheduler's view must prove the process is the workload's, and the workload must be
  ready to go (every rank idle; no disruption budget against it); otherwise the case is
  refused (unknown, mismatched, protected) or deferred under the scheduler's hold reason;
- claims the case at that step (`case.slurm_job`, `case.pod`), and then carries out the
  SIGTERM and SIGKILL steps its own way (scancel; eviction, deletion);
- verifies the result in its own view once the case is reclaimed, for the audit.

The reconciler calls these under its acting lock, one step at a time.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from actuator.config import KubernetesSettings, SlurmSettings
from actuator.decisions import Action, Decision, defer, move, wait
from actuator.fleet.directory import NodeDirectory
from actuator.kube import EvictionBlocked, KubeApi, KubeError, Pod
from actuator.kube_policies import NamespacePolicies
from actuator.models import Case, LiveState, Reason, State, Target
from actuator.node import NodeUnreachable
from actuator.slurm import SlurmApi, SlurmError
from actuator.store import Store

Why = tuple[Reason, str]
HOLD_RECHECK = 5.0  # seconds between the API calls for a pod case that is held back
_EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s]{1,255}")
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")  # a unix-style user name


@dataclass(frozen=True)
class Step:
    """What a scheduler did for one escalation step."""

    name: str  # recorded like a signal: SCANCEL, EVICT, DELETE, ...
    ok: bool
    detail: str
    record: dict[str, object]  # the audit record's own fields ("event" first)


class Scheduler(Protocol):
    hold: Reason  # the deferral reason of a case this scheduler holds back

    def applies(self, live: LiveState) -> bool:
        """The process runs under this scheduler (from the node's evidence)."""
        ...

    def not_ready(self, case: Case, live: LiveState) -> Why | None:
        """None when the step may go ahead; else why not (refusal or this hold)."""
        ...

    def claim(self, case: Case, live: LiveState) -> None:
        """At the SIGTERM step: record on the case that the scheduler carries it out."""
        ...

    def owns(self, case: Case) -> bool: ...

    def owner(self, case: Case, live: LiveState) -> dict[str, str] | None:
        """Who the workload names as its owner, for the notice (None: the process's user)."""
        ...

    def facts(self, live: LiveState) -> dict[str, str]:
        """What the scheduler says of the workload that policy rules match on (asked of
        every scheduler, whether or not it gates the process)."""
        ...

    def reclaim(self, case: Case, *, kill: bool, dry_run: bool = False) -> Step:
        """The step enforcement takes (or, with `dry_run`, what it would take: nothing is
        changed, and the Step says what would have been done)."""
        ...

    def verify(self, case: Case) -> dict[str, object]: ...


def gate(scheduler: Scheduler, case: Case, live: LiveState, decision: Decision) -> Decision:
    """Only the SIGTERM step and the way back to it are gated: an exit, a resolved alert or
    a refusal goes through as for any case. A held case stays held without a new
    transition each tick."""
    resuming = case.state == State.DEFERRED and case.reason_code == scheduler.hold
    if decision.action != Action.TERM and not (resuming and decision.code == Reason.RESUMED):
        return decision
    why = scheduler.not_ready(case, live)
    if why is None:
        return decision
    code, reason = why
    if code != scheduler.hold:
        return move(State.REFUSED, code, reason)
    if resuming:
        return wait()
    return defer(case, why, {})


# --- Slurm ---------------------------------------------------------------------------------


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
                "is excluded")  # fmt: skip
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
                    "idle: the job is kept")  # fmt: skip
        return None

    def _confirmed(self, rank: Target) -> bool:
        other = self.store.live_case_for(rank)
        return other is not None and other.notified_mono is not None and (
            other.state in (State.NOTIFIED, State.TERMINATING, State.KILLING)
            or other.reason_code == self.hold)  # fmt: skip

    def claim(self, case: Case, live: LiveState) -> None:
        case.slurm_job = live.slurm_job

    def owner(self, case: Case, live: LiveState) -> dict[str, str] | None:
        return None  # the job's user is the process's user (checked by uid)

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

    def reclaim(self, case: Case, *, kill: bool, dry_run: bool = False) -> Step:
        assert case.slurm_job is not None
        name, sig = ("SCANCEL-KILL", "KILL") if kill else ("SCANCEL", None)
        if dry_run:
            return Step(name, True, f"would cancel Slurm job {case.slurm_job}"
                        + (" with SIGKILL" if kill else ""),
                        {"event": "slurm_cancel", "job": case.slurm_job, "signal": sig,
                         "dry_run": True})  # fmt: skip
        try:
            ok, detail = self.cli.cancel(case.slurm_job, signal=sig)
        except SlurmError as exc:
            ok, detail = False, str(exc)
        record: dict[str, object] = {"event": "slurm_cancel", "job": case.slurm_job,
                                     "signal": sig}  # fmt: skip
        return Step(name, ok, detail, record)

    def verify(self, case: Case) -> dict[str, object]:
        """The job as the scheduler sees it after the reclaim, and the GPUs it counts."""
        assert case.slurm_job is not None
        try:
            job = self.cli.job(case.slurm_job, fresh=True)
            gpus = {n: self.cli.gpus_allocated(n) for n in (job.nodes if job else ())}
            return {"event": "slurm_verified", "job": case.slurm_job,
                    "state": job.state if job else "unknown", "gpus_allocated": gpus}  # fmt: skip
        except SlurmError as exc:
            return {"event": "slurm_verified", "job": case.slurm_job, "state": "unknown",
                    "error": str(exc)}  # fmt: skip


# --- Kubernetes ------------------------------------------------------------------------------


class KubePods:
    """A pod process is acted on only once the API server proves the pod is the one the
    node's cgroup names (same UID, on the case's node); then, per policy, the pod is
    evicted (the API server's disruption-budget check, asked first as a dry run), deleted,
    or its process signalled like any other."""

    hold = Reason.POD_BLOCKED

    def __init__(
        self,
        api: KubeApi,
        settings: KubernetesSettings,
        namespaces: NamespacePolicies | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.settings, self.namespaces = api, settings, namespaces
        self._clock = clock
        self._held: dict[int, tuple[float, Why]] = {}  # case id -> (since, why) while held

    def action_for(self, namespace: str) -> str:
        """A namespace's GpuReclaimPolicy may choose its own action."""
        if self.namespaces is not None:
            return self.namespaces.action_for(namespace)
        return self.settings.action

    def owner(self, case: Case, live: LiveState) -> dict[str, str] | None:
        """The pod's owner annotation: a user name (looked up like any user) or an e-mail
        address (told in the namespace's notice language); read from the pod whose UID
        the cgroup names, else nothing."""
        if not (live.pod and live.namespace):
            return None
        try:
            pod = self.api.pod(live.namespace, live.pod)
        except KubeError:
            return None
        if pod is None or pod.uid != live.pod_uid:
            return None
        value = pod.annotations.get(self.settings.owner_annotation, "").strip()
        if _EMAIL.fullmatch(value):
            language = self.namespaces.language_for(pod.namespace) if self.namespaces else None
            return {"email": value, "language": language or "en"}
        if _USER.fullmatch(value):
            return {"user": value}
        return None

    def applies(self, live: LiveState) -> bool:
        return bool(live.pod_uid)

    def not_ready(self, case: Case, live: LiveState) -> Why | None:
        """A held case is asked about again after HOLD_RECHECK, not on every tick: a pod a
        disruption budget protects for hours would cost the API server two calls a tick."""
        now = self._clock()
        held = self._held.get(case.id)
        if held is not None and now - held[0] < HOLD_RECHECK:
            return held[1]
        why = self._not_ready(case, live)
        self._held = {k: v for k, v in self._held.items() if now - v[0] < HOLD_RECHECK}
        if why is not None and why[0] == self.hold:
            self._held[case.id] = (now, why)
        else:
            self._held.pop(case.id, None)
        return why

    def _not_ready(self, case: Case, live: LiveState) -> Why | None:
        if not (live.pod and live.namespace):
            return Reason.UNKNOWN_EVIDENCE, (
                f"the process runs in pod UID {live.pod_uid}, which the kubelet names no "
                "single pod for: not acted on")  # fmt: skip
        where = f"pod {live.namespace}/{live.pod}"
        try:
            pod = self.api.pod(live.namespace, live.pod)
        except KubeError as exc:
            return self.hold, f"the API server cannot be asked about {where}: {exc}"
        if pod is None:
            return Reason.UNKNOWN_EVIDENCE, f"the API server does not know {where}"
        if pod.uid != live.pod_uid:
            return Reason.IDENTITY_MISMATCH, (
                f"{where} has UID {pod.uid}; the process runs in pod UID {live.pod_uid}"
            )
        if pod.node != case.node:
            return Reason.IDENTITY_MISMATCH, (
                f"{where} runs on {pod.node or 'no node'}, not on {case.node}"
            )
        if pod.terminating:
            return self.hold, f"{where} is already terminating"
        if self.action_for(pod.namespace) == "evict":
            try:
                self.api.evict(pod, dry_run=True)
            except EvictionBlocked as exc:
                return self.hold, f"{where} may not be evicted now: {exc}"
            except KubeError as exc:
                return self.hold, f"the API server would not evict {where}: {exc}"
        return None

    def claim(self, case: Case, live: LiveState) -> None:
        action = self.action_for(live.namespace)
        if action != "signal":
            case.pod = {"namespace": live.namespace, "name": live.pod, "uid": live.pod_uid,
                        "action": action}  # fmt: skip

    def owns(self, case: Case) -> bool:
        return case.pod is not None

    def facts(self, live: LiveState) -> dict[str, str]:
        return {}  # the namespace is already the kubelet's fact

    def _pod(self, case: Case) -> Pod:
        assert case.pod is not None
        return Pod(case.pod["namespace"], case.pod["name"], case.pod["uid"], case.node, "",
                   False)  # fmt: skip

    def reclaim(self, case: Case, *, kill: bool, dry_run: bool = False) -> Step:
        assert case.pod is not None
        pod, action = self._pod(case), case.pod.get("action", "evict")
        name = "EVICT" if action == "evict" else "DELETE"
        if dry_run:
            verb = "evict" if action == "evict" else "delete"
            return self._step(case, "DELETE-NOW" if kill else name, True,
                              f"would {verb} pod {pod.namespace}/{pod.name}")  # fmt: skip
        try:
            if not kill:
                if action == "evict":
                    self.api.evict(pod)
                else:
                    self.api.delete(pod)
                return self._step(case, name, True, "evicted" if action == "evict" else "deleted")
            # SIGKILL's step: a termination under way is ended at once; an eviction that
            # did not take is asked again (never a deletion past the disruption budget).
            now = self.api.pod(pod.namespace, pod.name)
            if now is None or now.uid != pod.uid:
                return self._step(case, "DELETE-NOW", False, "the pod is gone")
            if action == "evict" and not now.terminating:
                self.api.evict(pod)
                return self._step(case, "EVICT", True, "evicted again")
            self.api.delete(pod, grace_seconds=0)
            return self._step(case, "DELETE-NOW", True, "deleted with grace 0")
        except KubeError as exc:
            return self._step(case, "DELETE-NOW" if kill else name, False, str(exc))

    @staticmethod
    def _step(case: Case, name: str, ok: bool, detail: str) -> Step:
        return Step(name, ok, detail, {"event": "kube_reclaim", "pod": dict(case.pod or {}),
                                       "step": name})  # fmt: skip

    def verify(self, case: Case) -> dict[str, object]:
        assert case.pod is not None
        record: dict[str, object] = {"event": "kube_verified", "pod": dict(case.pod)}
        try:
            now = self.api.pod(case.pod["namespace"], case.pod["name"])
        except KubeError as exc:
            return {**record, "state": "unknown", "error": str(exc)}
        if now is None or now.uid != case.pod["uid"]:
            return {**record, "state": "gone"}
        return {**record, "state": "terminating" if now.terminating else now.phase}


@dataclass(frozen=True)
class Schedulers:
    """The schedulers a reconciler consults, and what the Kubernetes one needs at run time
    (its namespace policies, watched by the reconciler's thread; the API client)."""

    schedulers: tuple[Scheduler, ...] = ()
    namespaces: NamespacePolicies | None = None
    kube: KubeApi | None = None
