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
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actuator.policy import Duration, Match, Mode, Policy, ProjectRule, gentler

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
    grace: Duration | None = None
    term_timeout: Duration | None = Field(None, alias="termTimeout")
    kill_timeout: Duration | None = Field(None, alias="killTimeout")
    protected: bool = False
    action: Literal["evict", "delete", "signal"] | None = None
    notice: NoticeSpec = NoticeSpec()


def to_rule(namespace: str, name: str, spec: PolicySpec, cluster_mode: Mode) -> ProjectRule:
    return ProjectRule(
        name=f"GpuReclaimPolicy {namespace}/{name}",
        match=Match(namespaces=(namespace,)),
        mode=gentler(spec.mode, cluster_mode) if spec.mode else None,
        protected=spec.protected,
        idle_for=spec.idle_for,
        grace=spec.grace,
        term_timeout=spec.term_timeout,
        kill_timeout=spec.kill_timeout,
    )


class PolicyObjects:
    """The current objects, by (namespace, name); thread-safe, pure of the API."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[tuple[str, str], PolicySpec] = {}
        self.revision = 0  # bumped on every change, for callers that cache

    def replace(self, objects: list[dict[str, Any]]) -> None:
        specs = dict(filter(None, map(_parse, objects)))
        with self._lock:
            self._specs, self.revision = specs, self.revision + 1

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        key = _key(obj)
        with self._lock:
            if event_type == "DELETED":
                if self._specs.pop(key, None) is None:
                    return
            else:
                parsed = _parse(obj)
                if parsed is None:  # invalid: the object in force (if any) stays
                    return
                self._specs[key] = parsed[1]
            self.revision += 1

    def _first_by_namespace(self) -> dict[str, tuple[str, PolicySpec]]:
        with self._lock:
            items = sorted(self._specs.items())
        first: dict[str, tuple[str, PolicySpec]] = {}
        for (namespace, name), spec in items:
            first.setdefault(namespace, (name, spec))
        return first

    def rules(self, cluster_mode: Mode) -> tuple[ProjectRule, ...]:
        return tuple(to_rule(ns, name, spec, cluster_mode)
                     for ns, (name, spec) in self._first_by_namespace().items())  # fmt: skip

    def spec_for(self, namespace: str) -> PolicySpec | None:
        found = self._first_by_namespace().get(namespace)
        return found[1] if found else None


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _parse(obj: dict[str, Any]) -> tuple[tuple[str, str], PolicySpec] | None:
    key = _key(obj)
    if not all(key):
        log.warning("GpuReclaimPolicy without namespace or name skipped")
        return None
    try:
        return key, PolicySpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        log.warning("GpuReclaimPolicy %s/%s skipped: %s", *key, errors)
        return None


class PolicyWatch:
    """Keeps `objects` current from the API server (list, then watch; relist on 410)."""

    def __init__(self, api_client: Any, objects: PolicyObjects, *, timeout: float = 10.0,
                 watch_seconds: int = 300, backoff: float = 5.0) -> None:  # fmt: skip
        from kubernetes import client

        self._api = client.CustomObjectsApi(api_client)
        self.objects = objects
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
        answer = self._api.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _request_timeout=self._timeout
        )
        self.objects.replace(list(answer.get("items") or []))
        self.synced.set()
        self.last_error = ""
        return str((answer.get("metadata") or {}).get("resourceVersion", ""))

    def _watch(self, version: str, stop: threading.Event) -> None:
        from kubernetes import watch

        stream = watch.Watch()
        for event in stream.stream(
            self._api.list_cluster_custom_object, GROUP, VERSION, PLURAL,
            resource_version=version, timeout_seconds=self._watch_seconds,
            _request_timeout=(self._timeout, self._watch_seconds + self._timeout),
        ):  # fmt: skip
            if stop.is_set():
                stream.stop()
                return
            kind, obj = event.get("type"), event.get("raw_object") or event.get("object")
            if kind == "ERROR":  # 410 Gone (or another Status): start again from a list
                return
            if kind in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, dict):
                self.objects.apply(kind, obj)


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


def start_watch(api_client: Any, objects: PolicyObjects, stop: threading.Event,
                factory: Callable[..., PolicyWatch] = PolicyWatch) -> PolicyWatch:  # fmt: skip
    watcher = factory(api_client, objects)
    threading.Thread(target=watcher.run, args=(stop,), name="policy-watch", daemon=True).start()
    return watcher
