"""The actuator's /metrics from a fresh store: every known series exists, at 0."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from actuator.metrics import REFUSAL_REASONS, WEBHOOK_CODES, ActuatorCollector
from actuator.store import Store
from actuator.store.counters import demand_to_free


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


def test_notices_and_time_to_reclaim_come_from_the_cases(tmp_path: Path) -> None:
    from actuator.models import State
    from actuator.store.cases import insert_case
    from tests.helpers.cases import make_case

    store = Store(tmp_path / "db")
    store.init()
    # Three cases opened at t=1000: two warned, of which one is reclaimed 700 s later and
    # one 20 s later; a third refused without a notice.
    durations = {1: 700.0, 2: 20.0}
    for n in (1, 2, 3):
        case = make_case(pid=4000 + n, created=1000.0, updated=1000.0)
        with store._tx() as conn:
            insert_case(conn, case, {})
        if n == 3:
            store.transition(case, State.REFUSED, reason="protected", evidence={}, now=1001.0)
            continue
        case = store.transition(case, State.NOTIFIED, reason="idle", evidence={}, now=1001.0)
        case = store.transition(case, State.TERMINATING, reason="grace", evidence={}, now=1002.0)
        store.transition(
            case, State.RECLAIMED, reason="exited", evidence={}, now=1000.0 + durations[n]
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ActuatorCollector(store))
    assert registry.get_sample_value("gpu_reclaimer_notices_total") == 2
    histogram = "gpu_reclaimer_time_to_reclaim_seconds"
    assert registry.get_sample_value(histogram + "_count") == 2
    assert registry.get_sample_value(histogram + "_sum") == 720.0
    assert registry.get_sample_value(histogram + "_bucket", {"le": "15.0"}) == 0
    assert registry.get_sample_value(histogram + "_bucket", {"le": "30.0"}) == 1
    assert registry.get_sample_value(histogram + "_bucket", {"le": "600.0"}) == 1
    assert registry.get_sample_value(histogram + "_bucket", {"le": "900.0"}) == 2
    assert registry.get_sample_value(histogram + "_bucket", {"le": "+Inf"}) == 2


def test_the_endpoint_says_its_format_once_and_passes_promtool(tmp_path: Path) -> None:
    """One Content-Type (text format 0.0.4, one charset); the brief's four names as they are
    and every other metric under gpu_reclaimer_ (or the standard process_*); build info."""
    import re
    import shutil
    import subprocess

    from actuator.app import create_app
    from tests.helpers.api import make_runtime

    answer = create_app(make_runtime(tmp_path)).test_client().get("/metrics")
    assert answer.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    body = answer.get_data(as_text=True)
    names = set(re.findall(r"^# TYPE (\S+) ", body, re.MULTILINE))
    brief = {
        "gpu_idle_detected_total",
        "gpu_released_success_total",
        "gpu_release_failed_total",
        "gpu_memory_freed_bytes_total",
    }
    assert brief <= names
    assert all(n.startswith(("gpu_reclaimer_", "process_")) for n in names - brief), names
    assert 'gpu_reclaimer_build_info{python_version="' in body
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: `make setup` installs Debian's prometheus"
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=body, text=True, capture_output=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_demand_metrics_come_from_the_store_and_pass_promtool(tmp_path: Path) -> None:
    """Sources up or down, what waits, reclaims by trigger (needless ones too), and the
    demand-to-free histogram, as every worker reads them from the store."""
    import shutil
    import subprocess

    from prometheus_client import generate_latest

    store = Store(tmp_path / "db")
    store.init()
    store.set_demand({"slurm": True, "promql:a100": False}, {"slurm": 3, "promql:a100": 0})
    store.set_demand({"slurm": True, "promql:a100": False}, {"slurm": 2, "promql:a100": 0})
    store.count("reclaims", "demand")
    store.count("reclaims", "idle")
    store.count("reclaims", "idle")
    store.count("needless_reclaims", "idle")
    store.count_many(demand_to_free(45.5) + demand_to_free(700.0))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ActuatorCollector(store))

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("gpu_reclaimer_demand_source_up", source="slurm") == 1
    assert value("gpu_reclaimer_demand_source_up", source="promql:a100") == 0
    assert value("gpu_reclaimer_demand_waiting", source="slurm") == 2  # replaced, not added
    assert value("gpu_reclaimer_reclaims_total", trigger="idle") == 2
    assert value("gpu_reclaimer_reclaims_total", trigger="demand") == 1
    assert value("gpu_reclaimer_needless_reclaims_total", trigger="idle") == 1
    assert value("gpu_reclaimer_needless_reclaims_total", trigger="demand") == 0
    histogram = "gpu_reclaimer_demand_to_free_seconds"
    assert value(histogram + "_count") == 2 and value(histogram + "_sum") == 745.5
    assert value(histogram + "_bucket", le="60.0") == 1
    assert value(histogram + "_bucket", le="900.0") == 2
    assert value(histogram + "_bucket", le="+Inf") == 2
    promtool = shutil.which("promtool")
    assert promtool, "promtool: make setup installs Debian's prometheus"
    done = subprocess.run(
        [promtool, "check", "metrics"],
        input=generate_latest(registry),
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stdout + done.stderr
