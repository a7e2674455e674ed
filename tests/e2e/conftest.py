"""End-to-end tests: the whole loop with real processes (simulated NVML only).

They are part of `make test` (not opt-in). Each module marks itself `e2e`, so
`pytest -m "not e2e"` leaves them out while iterating on something else. Without
Prometheus/Alertmanager installed they skip with the install command.
"""

from __future__ import annotations

import shutil

import pytest

from actuator.demo.stack import INSTALL_HINT


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: end-to-end test of the whole loop (real Prometheus, Alertmanager, ...)"
    )


@pytest.fixture(scope="session")
def system_tools() -> None:
    if not shutil.which("prometheus") or not (
        shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    ):
        pytest.skip(f"Prometheus/Alertmanager not installed; {INSTALL_HINT}")
