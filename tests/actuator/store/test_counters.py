"""Counters and gauges in the store, on each backend: counted across connections (several
workers and replicas count into one row), gauges replaced, the demand histogram
cumulative, and the snapshot /metrics serves read at once."""

from __future__ import annotations

import threading

from actuator.store import open_store
from actuator.store.counters import DEMAND_TO_FREE_BUCKETS, demand_to_free


def test_counts_from_many_threads_add_up_in_one_row(database: str) -> None:
    store = open_store(database)
    store.init()

    def count() -> None:
        for _ in range(25):
            store.count_request(200)
        store.count("alerts_rejected", "bad_label")

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    store.count_request(401)
    snapshot = store.metric_snapshot()
    assert snapshot["requests"] == {"200": 100, "401": 1}
    assert snapshot["alerts_rejected"] == 4


def test_demand_gauges_are_replaced_not_added(database: str) -> None:
    store = open_store(database)
    store.init()
    store.set_demand({"slurm": True, "kube": False}, {"slurm": 3})
    store.set_demand({"slurm": False}, {"slurm": 1})
    assert store.demand_up() == {"slurm": False}  # kube's old reading is gone
    named = store.metric_snapshot()["named"]
    assert named["demand_up"] == {"slurm": 0} and named["demand_waiting"] == {"slurm": 1}


def test_the_demand_to_free_histogram_is_cumulative(database: str) -> None:
    store = open_store(database)
    store.init()
    store.count_many([b for seconds in (20.0, 45.0, 700.0) for b in demand_to_free(seconds)])
    named = store.metric_snapshot()["named"]
    buckets = {float(k): v for k, v in named["demand_to_free_bucket"].items()}
    assert buckets[30.0] == 1 and buckets[60.0] == 2 and buckets[900.0] == 3
    assert set(buckets) == set(DEMAND_TO_FREE_BUCKETS)
    assert named["demand_to_free_count"] == {"": 3}
    assert named["demand_to_free_ms"] == {"": 765_000}


def test_an_empty_store_snapshots_to_zeros(database: str) -> None:
    store = open_store(database)
    store.init()
    snapshot = store.metric_snapshot()
    assert snapshot["states"] == {} and snapshot["freed_bytes"] == 0
    assert snapshot["signals"] == {} and snapshot["notices"] == 0
    assert snapshot["breaker_open"] is False and snapshot["alerts_rejected"] == 0
