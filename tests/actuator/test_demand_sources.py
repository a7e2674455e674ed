"""Demand sources against the real parts where they exist: PromQL on a real Prometheus, the
pending-pod list through the official client against the API server stand-in; what Slurm
prints is parsed as Slurm 22.05+ prints it (the real slurmctld runs in
tests/slurm/test_slurm_demand.py). Nonsense and failures are DemandError: unknown demand."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from actuator.demand import DemandError, Reading, Request
from actuator.demand.kube_pending import PendingPods, pod_request
from actuator.demand.promql_queue import PromqlQueue, waiting_gpus
from actuator.demand.reader import DemandReader
from actuator.schedulers.kube_api import KubeApi
from actuator.schedulers.slurm_cli import gpus_per_node, parse_fields
from tests.helpers.kube import ApiServer
from tests.helpers.prom import start_prometheus
from tests.support import free_port


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("prom-demand")
    config = base / "prometheus.yml"
    config.write_text("global: {scrape_interval: 15s}\n")
    with start_prometheus(config, base) as server:
        yield server.url


def _queue(url: str, query: str) -> PromqlQueue:
    from prometheus_api_client import PrometheusConnect

    return PromqlQueue(PrometheusConnect(url), "a100", query, ("gpu-a-*",))


def test_a_promql_queue_is_a_count_of_one_gpu_requests_in_its_pool(prometheus: str) -> None:
    requests = _queue(prometheus, "vector(3)").read().requests
    assert [r.gpus for r in requests] == [1, 1, 1]
    assert {r.nodes for r in requests} == {("gpu-a-*",)} and requests[0].source == "promql:a100"
    assert _queue(prometheus, "sum(no_such_metric)").read().requests == ()  # nobody waits
    two = _queue(prometheus, 'label_replace(vector(2), "p", "x", "", "")').read()
    assert len(two.requests) == 2


@pytest.mark.parametrize(
    "query", ["vector(-1)", "vector(0.5)", "vector(1/0)", "vector(NaN)", "sum(rate(", "vector(1e9)"]
)
def test_nonsense_from_prometheus_is_unknown_demand(prometheus: str, query: str) -> None:
    with pytest.raises(DemandError):
        _queue(prometheus, query).read()


def test_an_unreachable_prometheus_is_unknown_demand() -> None:
    with pytest.raises(DemandError, match="Prometheus"):
        _queue(f"http://127.0.0.1:{free_port()}", "vector(1)").read()


def test_waiting_gpus_reads_scalars_and_vectors() -> None:
    assert waiting_gpus([1.0, "2"], "q") == 2
    assert waiting_gpus([{"metric": {}, "value": [1.0, "2"]}, {"value": [1, "1"]}], "q") == 3
    with pytest.raises(DemandError):
        waiting_gpus({"unexpected": True}, "q")


def _pod(name: str, gpus: str | None, *, reason: str = "Unschedulable", **spec) -> dict:
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}}
    return {
        "metadata": {"namespace": "ml", "name": name},
        "spec": {"containers": [container], **spec},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": reason,
                    "lastTransitionTime": "2026-12-02T06:00:00Z",
                }
            ],
        },
    }


def test_pending_pods_through_the_api_server(tmp_path: Path) -> None:
    with ApiServer(tmp_path) as server:
        server.pending = [
            _pod("train", "2", nodeSelector={"kubernetes.io/hostname": "gpu-a-1"}),
            _pod("cpu-only", None),
            _pod("waiting-for-image", "1", reason="SchedulingGated"),
        ]
        api = KubeApi.connect(str(server.kubeconfig()))
        (request,) = PendingPods(api).read().requests
        assert request == Request(
            source="kubernetes",
            key="ml/train",
            who="pod ml/train",
            gpus=2,
            nodes=("gpu-a-1",),
            since=1796191200.0,
        )
        assert ("GET", "/api/v1/pods?fieldSelector=status.phase%3DPending") in server.requests
        server.pending = [_pod("odd", "two")]
        with pytest.raises(DemandError):
            PendingPods(api).read()
    with pytest.raises(DemandError):  # the API server is gone
        PendingPods(api).read()


def test_a_pod_bound_to_a_node_or_without_gpus_is_no_request() -> None:
    assert pod_request(_pod("bound", "1", nodeName="gpu-a-1")) is None
    init = _pod("init", "1")
    init["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    ]
    request = pod_request(init)
    assert request is not None and request.gpus == 4


@pytest.mark.parametrize(
    ("line", "gpus"),
    [
        ("JobId=7 JobState=PENDING TresPerNode=gres:gpu:2 NumNodes=1", 2),
        ("JobId=7 JobState=PENDING TresPerNode=gres/gpu:h100:1 NumNodes=1", 1),
        ("JobId=7 JobState=PENDING TresPerJob=gres:gpu:4 NumNodes=1-1", 4),
        ("JobId=7 JobState=PENDING TresPerJob=gres:gpu:4 NumNodes=2", 0),
        ("JobId=7 JobState=PENDING TresPerNode=gres:shard:2 NumNodes=1", 0),
        ("JobId=7 JobState=PENDING NumNodes=1", 0),
    ],
)
def test_gpus_per_node_as_slurm_prints_them(line: str, gpus: int) -> None:
    assert gpus_per_node(parse_fields(line)) == gpus


class _Source:
    def __init__(self, name: str, *answers: object) -> None:
        self.name, self.answers, self.reads = name, itertools.cycle(answers), 0

    def read(self) -> Reading:
        self.reads += 1
        answer = next(self.answers)
        if isinstance(answer, Exception):
            raise answer
        return Reading(answer, {"n1": 1})  # type: ignore[arg-type]


def test_one_failed_source_makes_demand_unknown_and_reads_are_spaced() -> None:
    now = [0.0]
    job = Request(source="slurm", key="1", who="job 1")
    slurm = _Source("slurm", (job,))
    broken = _Source("promql:a100", DemandError("down"), ())
    buggy = _Source("kubernetes", ValueError("a bug"), ())
    reader = DemandReader([slurm, broken, buggy], interval=10.0, clock=lambda: now[0])
    first = reader.read()
    assert not first.known and first.requests == (job,) and first.free == {"n1": 1}
    assert first.down == {"promql:a100": "down", "kubernetes": "ValueError: a bug"}
    assert reader.read() is first and slurm.reads == 1  # within the interval: no new read
    now[0] = 10.0
    second = reader.read()
    assert second.known and second.requests == (job,)
    assert not DemandReader([], interval=1.0, clock=lambda: 0.0).read().known


def test_a_source_going_down_stops_an_escalation_and_says_so(
    tmp_path: Path, workloads, actuator_factory
) -> None:
    """A real actuator reads a real Prometheus's queue: demand starts the grace; Prometheus
    stops: demand is unknown, the escalation stops (audited), the gauge says which source
    is down, and nothing is signalled."""
    import json

    from tests.actuator.conftest import alert_for, payload
    from tests.support import wait_until

    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: 15s}\n")
    with start_prometheus(config, tmp_path / "prom") as prom:
        actuator = actuator_factory(
            workloads.node_dir,
            defaults={"reclaim_when": "demand", "grace": "60s"},
            demand={"prometheus": prom.url, "interval": "0.2s",
                    "pools": [{"pool": "sim", "nodes": ["*"], "query": "vector(1)"}]},
        )  # fmt: skip
        w = workloads.spawn(phases="idle")
        assert actuator.post(payload(alert_for(w))).status_code == 200
        wait_until(lambda: (actuator.case_for(w) or {}).get("demand"), 30)
    # Prometheus is gone.
    wait_until(lambda: actuator.metric("gpu_reclaimer_demand_source_up", source="promql:sim")
               == 0, 30)  # fmt: skip
    case = wait_until(lambda: (c := actuator.case_for(w)) and c["demand"] is None and c, 30)
    assert case["state"] == "notified" and case["reason_code"] == "demand_unknown", case
    assert case["signals"] == [] and w.alive()
    audit = [json.loads(line) for line in (actuator.workdir / "audit.jsonl").open()]
    (down,) = [a for a in audit if a["event"] == "demand_source"]
    assert down["source"] == "promql:sim" and not down["up"] and "Prometheus" in down["error"]


def test_in_the_background_a_slow_source_never_holds_a_pass_up() -> None:
    """Read by its own thread, a source that takes long leaves `read()` answering at once:
    the last reading while it is fresh, unknown once it is older than max_age."""
    import threading
    import time

    release = threading.Event()
    calls = []

    class Slow:
        name = "slurm"

        def read(self) -> Reading:
            calls.append(1)
            if len(calls) > 1:
                release.wait(10)  # the second reading hangs
            return Reading((Request(source="slurm", key="1", who="job 1"),))

    stop = threading.Event()
    reader = DemandReader([Slow()], interval=0.05, clock=time.monotonic, max_age=0.5)
    try:
        assert reader.read().known  # not started: read when asked
        reader.start(stop)
        from tests.support import wait_until

        wait_until(lambda: len(calls) >= 2, 5, 0.01)
        started = time.monotonic()
        fresh = reader.read()
        assert time.monotonic() - started < 0.1 and fresh.known and len(fresh.requests) == 1
        stale = wait_until(lambda: (d := reader.read()) and not d.known and d, 5, 0.05)
        assert "no reading for" in stale.down["slurm"]
        assert reader.read() is stale  # the same value while nothing new comes
    finally:
        stop.set()
        release.set()
