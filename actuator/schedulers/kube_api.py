"""The actuator's hands on Kubernetes: read a pod, evict it, delete it (official client).

Every call is made against one pod UID: the eviction and the deletion carry a UID
precondition, so a pod re-created under the same name is never the one removed. The
eviction goes through the API server's disruption-budget check; a dry run asks it first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from urllib3.exceptions import HTTPError

OWNER_ANNOTATION = "gpu-reclaimer.io/owner"


class KubeError(Exception):
    """The API server could not be asked, or refused in a way that is not an answer."""


class EvictionBlocked(KubeError):
    """429: a PodDisruptionBudget forbids the eviction now (the API server's own check)."""


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    terminating: bool  # deletionTimestamp is set: the kubelet is stopping it
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def ref(self) -> dict[str, str]:
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid}


def _object(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KubeError(f"the API server's answer: {what} is not an object")
    return value


def _text(value: Any, what: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise KubeError(f"the API server's answer: {what} is not text")
    return value


def _texts(value: Any, what: str) -> dict[str, str]:
    found = _object(value, what)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise KubeError(f"the API server's answer: {what} are not text")
    return dict(found)


def pod_from(raw: bytes, namespace: str, name: str) -> Pod:
    """A pod from the API server's JSON, or KubeError: an answer of another shape (a proxy's
    HTML page, a list, a number where text belongs) is an API server that cannot be asked,
    never a pod with empty fields."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise KubeError("the API server's answer is not JSON") from None
    data = _object(data, "the pod")
    meta = _object(data.get("metadata"), "metadata")
    spec, status = _object(data.get("spec"), "spec"), _object(data.get("status"), "status")
    return Pod(
        namespace=_text(meta.get("namespace"), "namespace", namespace),
        name=_text(meta.get("name"), "name", name),
        uid=_text(meta.get("uid"), "uid"),
        node=_text(spec.get("nodeName"), "nodeName"),
        phase=_text(status.get("phase"), "phase"),
        terminating=bool(meta.get("deletionTimestamp")),
        annotations=_texts(meta.get("annotations"), "annotations"),
        labels=_texts(meta.get("labels"), "labels"),
    )


def _status_message(exc: Any) -> str:
    """The message of the API server's Status object, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    causes = "; ".join(c.get("message", "") for c in (body.get("details") or {}).get("causes", []))
    message = body.get("message") or getattr(exc, "reason", "") or "error"
    return f"{message} ({causes})" if causes else str(message)


class KubeApi:
    """Pods through the API server, each call bounded by `timeout`."""

    def __init__(self, api_client: Any, *, timeout: float = 10.0) -> None:
        from kubernetes import client

        self.api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._client = client
        self._timeout = timeout

    @classmethod
    def connect(
        cls, kubeconfig: str | None, context: str | None = None, timeout: float = 10.0
    ) -> KubeApi:
        """From a kubeconfig file, else the pod's service account (in the cluster)."""
        from kubernetes import config

        if kubeconfig is not None:
            api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
        else:
            from kubernetes import client

            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            api_client = client.ApiClient(configuration)
        return cls(api_client, timeout=timeout)

    def _call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return method(*args, _request_timeout=self._timeout, **kwargs)
        except ApiException as exc:
            if exc.status == 429:
                raise EvictionBlocked(_status_message(exc)) from None
            if exc.status == 404:
                raise LookupError(_status_message(exc)) from None
            raise KubeError(f"HTTP {exc.status}: {_status_message(exc)}") from None
        except (HTTPError, OSError) as exc:
            raise KubeError(f"the API server did not answer: {exc}") from None

    def pod(self, namespace: str, name: str) -> Pod | None:
        """The pod as the API server has it now; None when it does not exist."""
        try:
            raw = self._call(
                self._core.read_namespaced_pod, name, namespace, _preload_content=False
            )
        except LookupError:
            return None
        return pod_from(raw.data, namespace, name)

    def pending_pods(self) -> bytes:
        """Every Pending pod in the cluster, as the API server's JSON (demand)."""
        raw = self._call(
            self._core.list_pod_for_all_namespaces,
            field_selector="status.phase=Pending",
            _preload_content=False,
        )
        return bytes(raw.data)

    def nodes(self) -> bytes:
        """Every node, as the API server's JSON (where a pending pod may run)."""
        raw = self._call(self._core.list_node, _preload_content=False)
        return bytes(raw.data)

    def evict(self, pod: Pod, *, dry_run: bool = False) -> None:
        """POST .../pods/NAME/eviction with a UID precondition; EvictionBlocked on 429."""
        c = self._client
        body = c.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=c.V1ObjectMeta(name=pod.name, namespace=pod.namespace),
            delete_options=c.V1DeleteOptions(preconditions=c.V1Preconditions(uid=pod.uid)),
        )
        try:
            self._call(
                self._core.create_namespaced_pod_eviction,
                pod.name,
                pod.namespace,
                body,
                dry_run="All" if dry_run else None,
                _preload_content=False,
                _content_type="application/json",
            )
        except LookupError:
            raise KubeError(f"pod {pod.namespace}/{pod.name} is gone") from None

    def delete(self, pod: Pod, *, grace_seconds: int | None = None) -> None:
        """DELETE the pod (this UID only); grace 0 ends a termination already under way."""
        c = self._client
        options = c.V1DeleteOptions(
            grace_period_seconds=grace_seconds, preconditions=c.V1Preconditions(uid=pod.uid)
        )
        try:
            self._call(
                self._core.delete_namespaced_pod,
                pod.name,
                pod.namespace,
                body=options,
                _preload_content=False,
                _content_type="application/json",
            )
        except LookupError:
            raise KubeError(f"pod {pod.namespace}/{pod.name} is gone") from None
