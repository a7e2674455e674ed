"""Kubernetes pods: proven by UID against the API server, evicted or deleted through it."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from actuator.audit_records import KubeReclaim, KubeVerified
from actuator.config import KubernetesSettings
from actuator.ladder import Verb
from actuator.models import Case, CaseUpdate, LiveState, Reason
from actuator.schedulers.base import Step, Why
from actuator.schedulers.kube_api import EvictionBlocked, KubeApi, KubeError, Pod
from actuator.schedulers.kube_policies import NamespacePolicies

HOLD_RECHECK = 5.0  # seconds between the API calls for a pod case that is held back
_EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s]{1,255}")
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")  # a unix-style user name


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

    def keep_asked(self, live: LiveState) -> str | None:
        """The pod's keep annotation (`gpu-reclaimer.io/keep: 4h`), read from the pod whose
        UID the cgroup names; the annotation wins over the process's environment."""
        pod = self._proven_pod(live)
        if pod is None:
            return None
        value = pod.annotations.get(self.settings.keep_annotation)
        return f"{self.settings.keep_annotation}={value}" if value is not None else None

    def _proven_pod(self, live: LiveState) -> Pod | None:
        if not (live.pod and live.namespace):
            return None
        try:
            pod = self.api.pod(live.namespace, live.pod)
        except KubeError:
            return None
        return pod if pod is not None and pod.uid == live.pod_uid else None

    def owner(self, case: Case, live: LiveState) -> dict[str, str] | None:
        """The pod's owner annotation: a user name (looked up like any user) or an e-mail
        address (told in the namespace's notice language); read from the pod whose UID
        the cgroup names, else nothing."""
        pod = self._proven_pod(live)
        if pod is None:
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
                "single pod for: not acted on"
            )
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

    def claim(self, case: Case, live: LiveState) -> CaseUpdate:
        action = self.action_for(live.namespace)
        if action == "signal":
            return CaseUpdate()
        pod = {"namespace": live.namespace, "name": live.pod, "uid": live.pod_uid}
        return CaseUpdate(pod={**pod, "action": action})

    def owns(self, case: Case) -> bool:
        return case.pod is not None

    def facts(self, live: LiveState) -> dict[str, str]:
        return {}  # the namespace is already the kubelet's fact

    def _pod(self, case: Case) -> Pod:
        assert case.pod is not None
        return Pod(case.pod["namespace"], case.pod["name"], case.pod["uid"], case.node, "", False)

    def reclaim(self, case: Case, verb: Verb, *, dry_run: bool = False) -> Step:
        assert case.pod is not None
        kill = verb == Verb.FORCE
        pod, action = self._pod(case), case.pod.get("action", "evict")
        name = "EVICT" if action == "evict" else "DELETE"
        if dry_run:
            doing = "evict" if action == "evict" else "delete"
            return self._step(
                case,
                "DELETE-NOW" if kill else name,
                True,
                f"would {doing} pod {pod.namespace}/{pod.name}",
            )
        try:
            if not kill:
                if action == "evict":
                    self.api.evict(pod)
                else:
                    self.api.delete(pod)
                return self._step(case, name, True, "evicted" if action == "evict" else "deleted")
            # The forced rung: a termination under way is ended at once; an eviction that
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
        return Step(
            name,
            ok,
            detail,
            KubeReclaim(pod=dict(case.pod or {}), step=name),
        )

    def verify(self, case: Case) -> KubeVerified:
        assert case.pod is not None
        pod = dict(case.pod)
        try:
            now = self.api.pod(case.pod["namespace"], case.pod["name"])
        except KubeError as exc:
            return KubeVerified(pod=pod, state="unknown", error=str(exc))
        if now is None or now.uid != case.pod["uid"]:
            return KubeVerified(pod=pod, state="gone")
        return KubeVerified(pod=pod, state="terminating" if now.terminating else now.phase)
