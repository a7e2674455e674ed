"""Demand from a queue a site already exports (a Slurm exporter, kube-state-metrics, its own
scheduler): one PromQL expression per node pool, whose value is the number of GPUs waiting
for that pool; each is a request for one GPU on a node of the pool."""

from __future__ import annotations

import math
from typing import Any, Protocol

from actuator.demand.model import MAX_GPUS_PER_NODE, DemandError, Reading, Request


class Queries(Protocol):
    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any: ...


MAX_WAITING = 100_000  # GPUs waiting for one pool: past this the answer is nonsense


def waiting_gpus(result: Any, query: str) -> int:
    """The expression's answer as a GPU count: an empty vector is 0; a vector is summed;
    anything negative, fractional, NaN or huge is nonsense (DemandError)."""
    try:
        if isinstance(result, list) and len(result) == 2 and not isinstance(result[0], dict):
            values = [float(result[1])]  # a scalar: [time, "value"]
        else:
            values = [float(sample["value"][1]) for sample in result]
    except (TypeError, KeyError, IndexError, ValueError) as exc:
        raise DemandError(f"{query!r}: not a number or a vector ({exc})") from None
    total = sum(values)
    if not math.isfinite(total) or total < 0 or total != int(total) or total > MAX_WAITING:
        raise DemandError(f"{query!r} = {total:g}: not a count of waiting GPUs")
    return int(total)


class PromqlQueue:
    def __init__(self, prom: Queries, pool: str, query: str, nodes: tuple[str, ...]) -> None:
        self.prom, self.pool, self.query, self.nodes = prom, pool, query, nodes
        self.name = f"promql:{pool}"

    def read(self) -> Reading:
        try:
            result = self.prom.custom_query(self.query)
        except Exception as exc:  # the client raises its own and requests' errors
            raise DemandError(f"Prometheus: {type(exc).__name__}: {exc}"[:300]) from None
        count = waiting_gpus(result, self.query)
        who = f"a request queued in pool {self.pool}"
        return Reading(
            tuple(
                Request(source=self.name, key=str(n), who=who, gpus=1, nodes=self.nodes)
                for n in range(min(count, MAX_GPUS_PER_NODE * 1024))
            )
        )
