"""Demand: who is waiting for a GPU, read from the schedulers and queues a site already has,
and which idle processes a waiting request would be served by (docs/demand.md)."""

from actuator.demand.model import (
    Claimant,
    Demand,
    DemandError,
    DemandSource,
    Reading,
    Request,
)

__all__ = ["Claimant", "Demand", "DemandError", "DemandSource", "Reading", "Request"]
