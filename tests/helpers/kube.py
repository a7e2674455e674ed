"""STAND-INS for the two Kubernetes parts no machine here can run, like the simulated NVML.

- `Kubelet`: the kubelet's pod-resources gRPC service on a unix socket, from the published
  proto (exporter/kube/podresources.proto): List answers the pods, containers and device
  ids it was given.
- `ApiServer`: the API server's REST paths the actuator uses, over HTTPS with a bearer
  token, with the official request and response shapes: GET a pod, POST its eviction
  (policy/v1 Eviction: UID precondition, dryRun, 429 when a disruption budget forbids it),
  DELETE it (DeleteOptions: UID precondition, grace), and GpuReclaimPolicy list/watch
  (a List with its resourceVersion, then a stream of watch events); the Pending pods and
  the nodes it is given, as lists (demand).

The pods are real processes in a real cgroup (`in_pod`, the cgroupfs driver's kubepods
layout): an eviction or a deletion signals them, as the kubelet would (SIGTERM, then
SIGKILL after the grace). Nothing else of Kubernetes is imitated.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import signal
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from flask import Flask, Response, request
from werkzeug.serving import make_server

from exporter.kube import podresources_pb2 as pb
from exporter.kube import podresources_pb2_grpc as pb_grpc
from tests.helpers.certs import self_signed

TOKEN = "stand-in-service-account-token"
GROUP, VERSION, PLURAL = "gpu-reclaimer.io", "v1alpha1", "gpureclaimpolicies"


# --- pods as real cgroups -------------------------------------------------------------


def _cgroup_root() -> Path:
    """A writable cgroup hierarchy: v1 `pids` (where the kubelet's cgroupfs driver puts
    pods) or the unified one."""
    for candidate in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        path = Path(candidate)
        if (path / "cgroup.procs").exists() and os.access(path, os.W_OK):
            return path
    raise RuntimeError("no writable cgroup hierarchy: the pod tests need root")


def gpu_node(
    name: str,
    gpus: int = 8,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    cordoned: bool = False,
) -> dict[str, Any]:
    """A Node as the API server lists it: its hostname label, allocatable GPUs (the device
    plugin's count), taints and cordon."""
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    if cordoned:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": str(gpus)}},
    }


@dataclass
class PodCgroup:
    uid: str
    container_id: str
    path: Path

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def remove(self) -> None:
        for directory in (self.path, self.path.parent):
            with contextlib.suppress(OSError):
                directory.rmdir()


def pod_cgroup(qos: str = "besteffort") -> PodCgroup:
    """kubepods/<qos>/pod<uid>/<container id>, as the cgroupfs driver names them."""
    uid = str(uuidlib.uuid4())
    container_id = os.urandom(32).hex()
    path = _cgroup_root() / "kubepods" / qos / f"pod{uid}" / container_id
    path.mkdir(parents=True)
    return PodCgroup(uid, container_id, path)


# --- the kubelet's pod-resources service ------------------------------------------------


@dataclass
class PodSpec:
    """One pod as both stand-ins know it."""

    namespace: str
    name: str
    container: str
    gpus: list[str]  # device ids the device plugin gave the container
    node: str
    cgroup: PodCgroup | None = None
    uid: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    grace_seconds: float = 2.0  # terminationGracePeriodSeconds
    pdb_blocks: bool = False  # a PodDisruptionBudget forbids its eviction
    deleted_at: str | None = None
    gone: bool = False  # its containers have stopped: the kubelet lists it no more
    evictions: list[dict[str, Any]] = field(default_factory=list)
    deletions: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.cgroup is not None and not self.uid:
            self.uid = self.cgroup.uid
        self.uid = self.uid or str(uuidlib.uuid4())


class _Lister(pb_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: Kubelet) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: Any) -> Any:
        self.kubelet.calls += 1
        if self.kubelet.failing:
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet restarting")
        pods = []
        for p in self.kubelet.pods:
            if p.gone:
                continue
            devices = [pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=p.gpus)]
            container = pb.ContainerResources(name=p.container, devices=devices)
            pods.append(pb.PodResources(name=p.name, namespace=p.namespace, containers=[container]))
        return pb.ListPodResourcesResponse(pod_resources=pods)


class Kubelet:
    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.pods: list[PodSpec] = []
        self.failing = False
        self.calls = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)
        self._server.add_insecure_port(f"unix://{socket_path}")

    def __enter__(self) -> Kubelet:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)


# --- the API server ----------------------------------------------------------------------


def _body() -> dict[str, Any] | None:
    """The request's JSON object. Like the API server, a request without a Content-Type is
    read as the first type it serves, JSON; another type is 415."""
    kind = request.mimetype
    if kind not in ("", "application/json"):
        return None
    return request.get_json(force=True, silent=True) or {}


def _status(code: int, reason: str, message: str, **details: Any) -> Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return Response(json.dumps(body), status=code, mimetype="application/json")


class ApiServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.pods: dict[tuple[str, str], PodSpec] = {}
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, dict[str, Any]]] = []  # (resourceVersion, watch event)
        self.requests: list[tuple[str, str]] = []
        self.positions: dict[int, int] = {}  # open watch stream -> resourceVersion it is at
        self.status_patches: list[tuple[str, str, dict[str, Any]]] = []
        self.pending: list[dict[str, Any]] = []  # Pending pods, as the API serves them
        self.nodes: list[dict[str, Any]] = []  # Nodes, as the API serves them
        self.broken: dict[str, bytes] = {}  # path -> what a broken proxy answers there (200)
        self._stream_ids = itertools.count()
        self.revision = 1
        self.compacted = 0
        self._lock = threading.Condition()
        key, cert = self_signed(workdir)
        self.ca = cert
        self._server = make_server(
            "127.0.0.1", 0, self._app(), threaded=True, ssl_context=(str(cert), str(key))
        )
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # `requests` keeps them all
        self.url = f"https://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> ApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()

    def kubeconfig(self) -> Path:
        path = self.workdir / "kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "stand-in",
                    "clusters": [
                        {
                            "name": "stand-in",
                            "cluster": {"server": self.url, "certificate-authority": str(self.ca)},
                        }
                    ],
                    "users": [{"name": "gpu-reclaimer", "user": {"token": TOKEN}}],
                    "contexts": [
                        {
                            "name": "stand-in",
                            "context": {"cluster": "stand-in", "user": "gpu-reclaimer"},
                        }
                    ],
                }
            )
        )
        return path

    # -- what tests set up ---------------------------------------------------------------

    def add_pod(self, pod: PodSpec) -> None:
        with self._lock:
            self.pods[(pod.namespace, pod.name)] = pod

    def compact(self) -> None:
        """Forget the event history, as etcd compaction (or an API server restart) does: a
        watch from an older resourceVersion gets 410 Gone and must list again."""
        with self._lock:
            self.compacted = self.revision
            self.events.clear()
            self._lock.notify_all()

    def put_policy(
        self, namespace: str, name: str, spec: dict[str, Any], *, silently: bool = False
    ) -> int:
        """Create or change one; `silently`: no watch event (one lost in an outage)."""
        with self._lock:
            kind = "MODIFIED" if (namespace, name) in self.policies else "ADDED"
            self.revision += 1
            old = self.policies.get((namespace, name))
            generation = (old["metadata"]["generation"] + 1) if old else 1
            obj = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "GpuReclaimPolicy",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": old["metadata"]["uid"] if old else str(uuidlib.uuid4()),
                    "generation": generation,
                    "resourceVersion": str(self.revision),
                },
                "spec": spec,
            }
            if old and "status" in old:
                obj["status"] = old["status"]
            self.policies[(namespace, name)] = obj
            if not silently:
                self.events.append((self.revision, {"type": kind, "object": obj}))
            self._lock.notify_all()
            return self.revision

    def delete_policy(self, namespace: str, name: str) -> None:
        with self._lock:
            obj = self.policies.pop((namespace, name))
            self.revision += 1
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.revision)}}
            self.events.append((self.revision, {"type": "DELETED", "object": obj}))
            self._lock.notify_all()

    # -- the kubelet's part of a deletion: stop the pod's processes -------------------------

    def _terminate(self, pod: PodSpec, grace: float) -> None:
        def run() -> None:
            cgroup = pod.cgroup
            if cgroup is None:
                return
            for pid in cgroup.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while cgroup.pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            for pid in cgroup.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while cgroup.pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            with self._lock:
                if not cgroup.pids():
                    pod.gone = True
                    self.pods.pop((pod.namespace, pod.name), None)

        threading.Thread(target=run, daemon=True).start()

    # -- the REST paths ---------------------------------------------------------------------

    def _pod_json(self, pod: PodSpec) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
            "annotations": pod.annotations,
            "resourceVersion": "7",
        }
        if pod.deleted_at:
            meta["deletionTimestamp"] = pod.deleted_at
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": meta,
            "spec": {
                "nodeName": pod.node,
                "containers": [{"name": pod.container}],
                "terminationGracePeriodSeconds": pod.grace_seconds,
            },
            "status": {"phase": "Running"},
        }

    def _app(self) -> Flask:
        app = Flask("kube-api-stand-in")

        @app.before_request
        def authenticate() -> Response | None:
            self.requests.append((request.method, request.full_path.rstrip("?")))
            if request.headers.get("Authorization") != f"Bearer {TOKEN}":
                return _status(401, "Unauthorized", "Unauthorized")
            if request.path in self.broken:
                return Response(self.broken[request.path], 200, mimetype="application/json")
            return None

        @app.get("/api/v1/pods")
        def list_pods() -> Response:
            """Pods of all namespaces; only the selector demand uses is understood."""
            selector = request.args.get("fieldSelector", "")
            if selector != "status.phase=Pending":
                return _status(400, "BadRequest", f"unsupported fieldSelector {selector!r}")
            body = {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.revision)},
                "items": self.pending,
            }
            return Response(json.dumps(body), mimetype="application/json")

        @app.get("/api/v1/nodes")
        def list_nodes() -> Response:
            body = {
                "kind": "NodeList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.revision)},
                "items": self.nodes,
            }
            return Response(json.dumps(body), mimetype="application/json")

        @app.get("/api/v1/namespaces/<ns>/pods/<name>")
        def read_pod(ns: str, name: str) -> Response:
            pod = self.pods.get((ns, name))
            if pod is None:
                return _status(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
            return Response(json.dumps(self._pod_json(pod)), mimetype="application/json")

        @app.post("/api/v1/namespaces/<ns>/pods/<name>/eviction")
        def evict(ns: str, name: str) -> Response:
            body = _body()
            if body is None:
                return _status(415, "UnsupportedMediaType", f"{request.mimetype} is not served")
            if body.get("kind") != "Eviction" or body.get("apiVersion") != "policy/v1":
                return _status(400, "BadRequest", "not a policy/v1 Eviction")
            pod = self.pods.get((ns, name))
            if pod is None:
                return _status(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
            options = body.get("deleteOptions") or {}
            wanted = (options.get("preconditions") or {}).get("uid")
            if wanted and wanted != pod.uid:
                return _status(
                    409,
                    "Conflict",
                    f"Precondition failed: UID in precondition: "
                    f"{wanted}, UID in object meta: {pod.uid}",
                )
            dry_run = request.args.get("dryRun") == "All" or "All" in options.get("dryRun", [])
            pod.evictions.append({"dry_run": dry_run, "uid": wanted})
            if pod.pdb_blocks:
                cause = {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget "
                    "serving-pdb needs 1 healthy pods and has 1 currently",
                }
                message = "Cannot evict pod as it would violate the pod's disruption budget."
                return _status(429, "TooManyRequests", message, causes=[cause])
            if not dry_run and not pod.deleted_at:
                pod.deleted_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                self._terminate(pod, pod.grace_seconds)
            return Response(
                json.dumps(
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "code": 201,
                    }
                ),
                status=201,
                mimetype="application/json",
            )

        @app.delete("/api/v1/namespaces/<ns>/pods/<name>")
        def delete_pod(ns: str, name: str) -> Response:
            pod = self.pods.get((ns, name))
            if pod is None:
                return _status(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
            options = _body()
            if options is None:
                return _status(415, "UnsupportedMediaType", f"{request.mimetype} is not served")
            wanted = (options.get("preconditions") or {}).get("uid")
            if wanted and wanted != pod.uid:
                return _status(
                    409,
                    "Conflict",
                    f"Precondition failed: UID in precondition: "
                    f"{wanted}, UID in object meta: {pod.uid}",
                )
            grace = options.get("gracePeriodSeconds")
            pod.deletions.append({"grace": grace, "uid": wanted})
            pod.deleted_at = pod.deleted_at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            self._terminate(pod, pod.grace_seconds if grace is None else grace)
            return Response(json.dumps(self._pod_json(pod)), mimetype="application/json")

        @app.patch(f"/apis/{GROUP}/{VERSION}/namespaces/<ns>/{PLURAL}/<name>/status")
        def patch_status(ns: str, name: str) -> Response:
            # Custom resources take JSON merge patches, not strategic ones (as the API server).
            if request.mimetype != "application/merge-patch+json":
                return _status(
                    415,
                    "UnsupportedMediaType",
                    f"{request.mimetype} is not supported for custom resources",
                )
            patch = request.get_json(force=True)
            with self._lock:
                obj = self.policies.get((ns, name))
                if obj is None:
                    return _status(404, "NotFound", f'{PLURAL} "{name}" not found')
                self.revision += 1
                obj = {
                    **obj,
                    "status": {**obj.get("status", {}), **patch.get("status", {})},
                    "metadata": {**obj["metadata"], "resourceVersion": str(self.revision)},
                }
                self.policies[(ns, name)] = obj
                self.status_patches.append((ns, name, patch["status"]))
                self.events.append((self.revision, {"type": "MODIFIED", "object": obj}))
                self._lock.notify_all()
            return Response(json.dumps(obj), mimetype="application/json")

        @app.get(f"/apis/{GROUP}/{VERSION}/{PLURAL}")
        def list_policies() -> Response:
            if (request.args.get("watch") or "").lower() in ("true", "1"):
                since = int(request.args.get("resourceVersion") or 0)
                timeout = float(request.args.get("timeoutSeconds") or 30)
                return Response(self._watch(since, timeout), mimetype="application/json")
            with self._lock:
                body = {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "GpuReclaimPolicyList",
                    "metadata": {"resourceVersion": str(self.revision)},
                    "items": list(self.policies.values()),
                }
            return Response(json.dumps(body), mimetype="application/json")

        return app

    def caught_up(self, revision: int) -> int:
        """How many open watches have seen `revision` (by their list or by an event)."""
        with self._lock:
            return sum(1 for at in self.positions.values() if at >= revision)

    def _watch(self, since: int, timeout: float) -> Iterator[str]:
        stream = next(self._stream_ids)
        with self._lock:
            self.positions[stream] = since
        try:
            yield from self._events(stream, since, timeout)
        finally:
            with self._lock:
                self.positions.pop(stream, None)

    def _events(self, stream: int, since: int, timeout: float) -> Iterator[str]:
        deadline = time.monotonic() + timeout
        sent = since
        while time.monotonic() < deadline:
            with self._lock:
                compacted = self.compacted
            if sent < compacted:
                gone = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "reason": "Expired",
                    "code": 410,
                    "message": f"too old resource version: {sent} ({compacted})",
                }
                yield json.dumps({"type": "ERROR", "object": gone}) + "\n"
                return
            with self._lock:
                fresh = [(rv, e) for rv, e in self.events if rv > sent]
                if not fresh:
                    self._lock.wait(min(0.2, max(deadline - time.monotonic(), 0)))
                    continue
            for rv, event in fresh:
                sent = rv
                yield json.dumps(event) + "\n"
                with self._lock:
                    self.positions[stream] = rv
