"""GpuReclaimPolicy objects (the CRD, deploy/kubernetes/base/crd.yaml) as policy rules.

A namespace's GpuReclaimPolicy becomes one project rule matching that namespace (the
kubelet's word for a process's namespace, never an alert label), placed after the policy
file's own rules: the cluster's rules win where both match, so a namespace cannot lift a
protection the file gives it. Its mode is capped at the file's `mode`: a tenant can ask
for less than the cluster enforces, never more. Several in one namespace: the first by
name applies. The watch is list-then-watch from the list's resourceVersion, relisting
when the API server says the version is gone (410); an object that fails validation is
skipped, logged, and changes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actuator.policy import Duration, Match, Mode, Policy, ProjectRule, ReclaimWhen, gentler

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL, KIND = (
    "gpu-reclaimer.io",
    "v1alpha1",
    "gpureclaimpolicies",
    "GpuReclaimPolicy",
)


class NoticeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    language: Literal["en", "zh-CN"] | None = None  # for owners the annotation names by e-mail


class PolicySpec(BaseModel):
    """`spec` of a GpuReclaimPolicy; the CRD's OpenAPI schema says the same."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    mode: Mode | None = None
    idle_for: Duration | None = Field(None, alias="idleFor")
    min_runtime: Duration | None = Field(None, alias="minRuntime")
    grace: Duration | None = None
    term_timeout: Duration | None = Field(None, alias="termTimeout")
    kill_timeout: Duration | None = Field(None, alias="killTimeout")
    protected: bool = False
    reclaim_when: ReclaimWhen | None = Field(None, alias="reclaimWhen")
    action: Literal["evict", "delete", "signal"] | None = None
    notice: NoticeSpec = NoticeSpec()


def to_rule(namespace: str, name: str, spec: PolicySpec, cluster_mode: Mode) -> ProjectRule:
    return ProjectRule(
        name=f"GpuReclaimPolicy {namespace}/{name}",
        match=Match(namespaces=(namespace,)),
        mode=gentler(spec.mode, cluster_mode) if spec.mode else None,
        protected=spec.protected,
        idle_for=spec.idle_for,
        min_runtime=spec.min_runtime,
        grace=spec.grace,
        term_timeout=spec.term_timeout,
        kill_timeout=spec.kill_timeout,
        reclaim_when=spec.reclaim_when,
    )


class PolicyObjects:
    """The current objects, by (namespace, name); thread-safe, pure of the API. Besides the
    valid specs it keeps what each object's status should say (`status_of`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[tuple[str, str], PolicySpec] = {}
        self._seen: dict[tuple[str, str], Seen] = {}  # every object, valid or not
        self.revision = 0  # bumped on every change of the specs, for callers that cache

    def replace(self, objects: list[dict[str, Any]]) -> None:
        seen = {s.key: s for s in map(_seen, objects) if all(s.key)}
        specs = {k: s.spec for k, s in seen.items() if s.spec is not None}
        with self._lock:
            self._specs, self._seen, self.revision = specs, seen, self.revision + 1

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        seen = _seen(obj)
        key = seen.key
        if not all(key):
            return
        with self._lock:
            if event_type == "DELETED":
                self._seen.pop(key, None)
                if self._specs.pop(key, None) is None:
                    return
            else:
                self._seen[key] = seen
                if seen.spec is None or self._specs.get(key) == seen.spec:
                    return  # invalid (the object in force stays), or only its status moved
                self._specs[key] = seen.spec
            self.revision += 1

    def keys(self, namespace: str | None = None) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(k for k in self._seen if namespace in (None, k[0]))

    def status_of(self, key: tuple[str, str], cluster_mode: Mode) -> tuple[Seen, dict[str, str]]:
        """The object as last seen, and the Accepted condition its status should carry."""
        with self._lock:
            seen = self._seen[key]
            kept = key in self._specs
        first = self._first_by_namespace().get(key[0])
        if seen.spec is None:
            error = seen.error + ("; its last valid spec stays in force" if kept else "")
            return seen, _condition("False", "Invalid", error)
        if first is None or first[0] != key[1]:
            applies = f"GpuReclaimPolicy {key[0]}/{first[0]}" if first else "another policy"
            return seen, _condition(
                "False",
                "Shadowed",
                f"{applies} applies: the first by name in a namespace is the one in force",
            )
        message = "in force for the namespace's pods, after the cluster's own rules"
        if seen.spec.mode and gentler(seen.spec.mode, cluster_mode) != seen.spec.mode:
            message += f"; mode {seen.spec.mode} capped at the cluster's {cluster_mode}"
        return seen, _condition("True", "InForce", message)

    def _first_by_namespace(self) -> dict[str, tuple[str, PolicySpec]]:
        with self._lock:
            items = sorted(self._specs.items())
        first: dict[str, tuple[str, PolicySpec]] = {}
        for (namespace, name), spec in items:
            first.setdefault(namespace, (name, spec))
        return first

    def rules(self, cluster_mode: Mode) -> tuple[ProjectRule, ...]:
        return tuple(
            to_rule(ns, name, spec, cluster_mode)
            for ns, (name, spec) in self._first_by_namespace().items()
        )

    def spec_for(self, namespace: str) -> PolicySpec | None:
        found = self._first_by_namespace().get(namespace)
        return found[1] if found else None


@dataclass(frozen=True)
class Seen:
    """One object as the API server last gave it."""

    key: tuple[str, str]
    uid: str  # a re-created object of the same name is another object
    generation: int
    spec: PolicySpec | None  # None: invalid
    error: str
    status: dict[str, Any]


def _condition(status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": "Accepted", "status": status, "reason": reason, "message": message}


def _seen(obj: dict[str, Any]) -> Seen:
    meta = obj.get("metadata") or {}
    key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
    generation = meta.get("generation")
    generation = generation if isinstance(generation, int) else 0
    uid = str(meta.get("uid", ""))
    raw_status = obj.get("status")
    status: dict[str, Any] = raw_status if isinstance(raw_status, dict) else {}
    if not all(key):
        log.warning("GpuReclaimPolicy without namespace or name skipped")
        return Seen(key, uid, generation, None, "no namespace or name", status)
    try:
        spec = PolicySpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        log.warning("GpuReclaimPolicy %s/%s skipped: %s", *key, errors)
        return Seen(key, uid, generation, None, f"not applied: {errors}", status)
    return Seen(key, uid, generation, spec, "", status)


class PolicyWatch:
    """Keeps `objects` current from the API server (list, then watch; relist on 410)."""

    def __init__(
        self,
        api_client: Any,
        objects: PolicyObjects,
        *,
        timeout: float = 10.0,
        watch_seconds: int = 300,
        backoff: float = 5.0,
        cluster_mode: Mode | None = None,
    ) -> None:
        from kubernetes import client

        self._api = client.CustomObjectsApi(api_client)
        self.objects = objects
        self.cluster_mode = cluster_mode  # None: statuses are not written
        self._written: dict[tuple[str, str], tuple[str, int, tuple[tuple[str, Any], ...]]] = {}
        self._timeout, self._watch_seconds, self._backoff = timeout, watch_seconds, backoff
        self.synced = threading.Event()
        self.last_error = ""

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                version = self._list()
                self._watch(version, stop)
            except Exception as exc:  # the API server away: keep the last objects, retry
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("GpuReclaimPolicy watch: %s; retrying in %gs", exc, self._backoff)
                stop.wait(self._backoff)

    def _list(self) -> str:
        answer: Any = self._api.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _request_timeout=self._timeout
        )
        self.objects.replace(list(answer.get("items") or []))
        self.synced.set()
        self.last_error = ""
        self._write_statuses(None)
        return str((answer.get("metadata") or {}).get("resourceVersion", ""))

    def _watch(self, version: str, stop: threading.Event) -> None:
        from kubernetes import watch

        stream = watch.Watch()
        for event in stream.stream(
            self._api.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            resource_version=version,
            timeout_seconds=self._watch_seconds,
            _request_timeout=(self._timeout, self._watch_seconds + self._timeout),
        ):
            if stop.is_set():
                stream.stop()
                return
            kind, obj = event.get("type"), event.get("raw_object") or event.get("object")
            if kind == "ERROR":  # 410 Gone (or another Status): start again from a list
                return
            if kind in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, dict):
                self.objects.apply(kind, obj)
                # One object's change can shadow or uncover its namespace's others.
                namespace = (obj.get("metadata") or {}).get("namespace")
                self._write_statuses(str(namespace) if namespace else None)

    def _write_statuses(self, namespace: str | None) -> None:
        """Tell each object's author whether it is in force, and why not: only where the
        status says otherwise (every replica computes the same, so they converge)."""
        if self.cluster_mode is None:
            return
        for key in self.objects.keys(namespace):
            seen, found = self.objects.status_of(key, self.cluster_mode)
            condition: dict[str, Any] = dict(found)
            conditions = seen.status.get("conditions") or []
            current = next(
                (c for c in conditions if isinstance(c, dict) and c.get("type") == "Accepted"), {}
            )
            same = all(current.get(k) == v for k, v in condition.items())
            if same and seen.status.get("observedGeneration") == seen.generation:
                continue
            # Written already; its MODIFIED event is on the way.
            if self._written.get(key) == (seen.uid, seen.generation, tuple(condition.items())):
                continue
            when = current.get("lastTransitionTime") if same else None
            condition = {
                **condition,
                "observedGeneration": seen.generation,
                "lastTransitionTime": when or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            body = {"status": {"observedGeneration": seen.generation, "conditions": [condition]}}
            try:
                self._api.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    key[0],
                    PLURAL,
                    key[1],
                    body,
                    _content_type="application/merge-patch+json",
                    _request_timeout=self._timeout,
                )
            except Exception as exc:  # a status is courtesy: never in the way of the watch
                log.warning("GpuReclaimPolicy %s/%s: status not written: %s", *key, exc)
                continue
            self._written[key] = (
                seen.uid,
                seen.generation,
                tuple(
                    (k, v)
                    for k, v in condition.items()
                    if k in ("type", "status", "reason", "message")
                ),
            )


class NamespacePolicies:
    """What the reconciler asks: the policy with the namespaces' rules, and their actions."""

    def __init__(self, objects: PolicyObjects, default_action: str) -> None:
        self.objects, self.default_action = objects, default_action
        self._cached: tuple[int, int, Policy] | None = None

    def policy(self, base: Policy) -> Policy:
        revision = self.objects.revision
        if self._cached is not None and self._cached[:2] == (revision, id(base)):
            return self._cached[2]
        rules = self.objects.rules(base.mode)
        merged = base.model_copy(update={"projects": (*base.projects, *rules)}) if rules else base
        self._cached = (revision, id(base), merged)
        return merged

    def action_for(self, namespace: str) -> str:
        spec = self.objects.spec_for(namespace)
        return spec.action if spec and spec.action else self.default_action

    def language_for(self, namespace: str) -> str | None:
        spec = self.objects.spec_for(namespace)
        return spec.notice.language if spec else None


def start_watch(
    api_client: Any,
    objects: PolicyObjects,
    stop: threading.Event,
    cluster_mode: Mode | None = None,
    factory: Callable[..., PolicyWatch] = PolicyWatch,
) -> PolicyWatch:
    watcher = factory(api_client, objects, cluster_mode=cluster_mode)
    threading.Thread(target=watcher.run, args=(stop,), name="policy-watch", daemon=True).start()
    return watcher
