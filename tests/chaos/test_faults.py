"""The chaos run's injector (actuator/chaos/faults.py): every fault a plan can draw has its
way in, and a fault that has nothing to act on here is counted as skipped, never raised."""

from __future__ import annotations

from actuator.chaos.faults import SERVICE_OF, Injector, _lease_holder_pid
from actuator.chaos.plan import FAULT_KINDS, FaultPlan
from actuator.demo.stack import Stack


def test_every_fault_kind_has_a_handler() -> None:
    """A kind added to the plan without its handler would only fail mid-run, an hour in."""
    missing = [
        kind for kind in FAULT_KINDS if kind not in SERVICE_OF and not hasattr(Injector, f"_{kind}")
    ]
    assert missing == []
    assert set(SERVICE_OF) <= set(FAULT_KINDS)  # no handler for a kind no plan draws


def test_a_fault_with_nothing_to_act_on_is_counted_as_skipped() -> None:
    """A stack without its own audit volume, PostgreSQL or agents (nothing started)."""
    injector = Injector(Stack(), truth=None)
    for kind in ("audit_full", "restart_postgres", "kill_agent", "agent_hang"):
        injector.inject(FaultPlan(at=1.0, kind=kind, seconds=1.0))
    assert dict(injector.counts) == {
        "audit_full_skipped": 1,
        "restart_postgres_skipped": 1,
        "kill_agent_skipped": 1,
        "agent_hang_skipped": 1,
    }
    assert injector.log == []  # nothing happened, so nothing is logged as injected


def test_the_lease_holder_is_read_only_from_postgresql() -> None:
    assert _lease_holder_pid("sqlite:///tmp/x.db") is None
    assert _lease_holder_pid("/var/lib/gpu-reclaimer/store.db") is None
    # Unreachable: unknown, not an error (the first replica is taken).
    assert _lease_holder_pid("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1") is None
