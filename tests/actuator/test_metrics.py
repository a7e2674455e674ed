"""The actuator's /metrics from a fresh store: every known series exists, at 0."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from actuator.metrics import REFUSAL_REASONS, WEBHOOK_CODES, ActuatorCollector
from actuator.store import Store


def test_known_codes_and_reasons_start_at_zero(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    store.init()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ActuatorCollector(store))
    for code in WEBHOOK_CODES:
        value = registry.get_sample_value("gpu_reclaimer_webhook_requests_total", {"code": code})
        assert value == 0
    for reason in REFUSAL_REASONS:
        value = registry.get_sample_value("gpu_reclaimer_refusals_total", {"reason": reason})
        assert value == 0
    assert registry.get_sample_value("gpu_released_success_total") == 0
    assert registry.get_sample_value("gpu_reclaimer_store_up") == 1
