"""Which pod holds a GPU: the kubelet's pod-resources API, the socket dcgm-exporter reads.

The kubelet lists each pod's containers with the devices the device plugin allocated to
them (`nvidia.com/gpu`: GPU UUIDs; with time-slicing `UUID::N` replicas). A process whose
cgroup puts it in a pod and whose GPU one pod alone holds belongs to that pod. When several
pods share the GPU (time-slicing), or the kubelet does not answer, the pod is unknown: the
caller leaves the name empty and never guesses.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
MAX_MESSAGE = 16 * 1024 * 1024  # a node with many pods answers more than gRPC's 4 MiB default


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    container: str


class PodLocator(Protocol):
    def locate(self, uuid: str, *, max_age: float | None = None) -> PodRef | None: ...


def device_key(device_id: str) -> str:
    """The GPU a device id names: a time-slicing replica `GPU-x::3` is GPU `GPU-x`."""
    return device_id.split("::", 1)[0]


def holders(pods: Iterable[object], resource_prefixes: tuple[str, ...]) -> dict[str, set[PodRef]]:
    """GPU UUID -> the pod containers it is allocated to, from a List response's pods."""
    found: dict[str, set[PodRef]] = {}
    for pod in pods:
        for container in pod.containers:  # type: ignore[attr-defined]
            ref = PodRef(pod.namespace, pod.name, container.name)  # type: ignore[attr-defined]
            for devices in container.devices:
                if not devices.resource_name.startswith(resource_prefixes):
                    continue
                for device_id in devices.device_ids:
                    found.setdefault(device_key(device_id), set()).add(ref)
    return found


class PodResources:
    """A client of the kubelet's pod-resources socket; one List per `refresh` seconds."""

    def __init__(
        self,
        socket_path: str | Path = DEFAULT_SOCKET,
        *,
        timeout: float = 1.0,
        refresh: float = 10.0,
        resource_prefixes: tuple[str, ...] = ("nvidia.com/",),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import grpc  # only nodes that run pods load gRPC

        from exporter.kube import podresources_pb2, podresources_pb2_grpc

        self.socket_path = Path(socket_path)
        self._grpc = grpc
        self._request = podresources_pb2.ListPodResourcesRequest
        self._channel = grpc.insecure_channel(
            f"unix://{self.socket_path}",
            options=[("grpc.max_receive_message_length", MAX_MESSAGE)],
        )
        self._stub = podresources_pb2_grpc.PodResourcesListerStub(self._channel)
        self._timeout = timeout
        self._refresh = refresh
        self._prefixes = resource_prefixes
        self._clock = clock
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._holders: dict[str, set[PodRef]] | None = None
        self.last_error = ""

    def close(self) -> None:
        self._channel.close()

    def holders(self, *, max_age: float | None = None) -> dict[str, set[PodRef]] | None:
        """GPU UUID -> pod containers, or None when the kubelet did not answer; a List at
        most `max_age` seconds old (default: the `refresh` period)."""
        limit = self._refresh if max_age is None else max_age
        with self._lock:
            if self._clock() - self._at < limit:
                return self._holders
        try:
            answer = self._stub.List(self._request(), timeout=self._timeout)
            value: dict[str, set[PodRef]] | None = holders(answer.pod_resources, self._prefixes)
            error = ""
        except self._grpc.RpcError as exc:
            value, error = None, f"kubelet pod-resources: {exc.code().name}: {exc.details()}"
        with self._lock:
            self._holders, self._at, self.last_error = value, self._clock(), error
        return value

    def locate(self, uuid: str, *, max_age: float | None = None) -> PodRef | None:
        """The one pod container the GPU is allocated to; None if none, several or unknown."""
        table = self.holders(max_age=max_age)
        refs = table.get(uuid, set()) if table is not None else set()
        pods = {(r.namespace, r.name) for r in refs}
        return next(iter(refs)) if len(pods) == 1 and len(refs) == 1 else None
