"""What an evidence picture asks Prometheus: the proven GPU and PID (quoted), the rules' window
and thresholds, the time range from the process's start."""

from __future__ import annotations

from actuator.evidence.queries import Subject, panels, selector, step_for, window
from exporter.thresholds import SHIPPED, from_rules
from tests.support import REPO


def test_a_picture_selects_the_proven_gpu_and_pid_and_starts_with_the_process() -> None:
    hostile = Subject('GPU-1"} or up{x="', 42, start_time=1000.0)
    assert selector(hostile) == '{uuid="GPU-1\\"} or up{x=\\"", pid="42"}'
    queries = [p.query for p in panels(hostile, SHIPPED)]
    assert all(selector(hostile) in q for q in queries)
    # The rule's window and thresholds, read from the rules file as the actuator reads them.
    assert "[1m]" in queries[0] and [p.threshold for p in panels(hostile, SHIPPED)] == [
        SHIPPED.max_sm_util,
        None,
        SHIPPED.max_cpu_cores,
        0.0,
    ]
    assert window(hostile, now=5000.0, span=3 * 3600) == (1000.0, 5000.0)  # since its start
    assert window(hostile, now=20000.0, span=3600) == (16400.0, 20000.0)
    # Whole seconds, rounded up (the client would round to the nearest): the newest sample
    # (scraped at 20000.2 for a process started at 19999.7) is inside, the time before the
    # process outside.
    young = Subject("GPU-1", 42, start_time=19999.7)
    assert window(young, now=20000.4, span=3600) == (20000.0, 20001.0)
    assert step_for(0, 3600) == 15.0 and step_for(0, 60) == 1.0


def test_the_window_comes_from_the_rules_file_the_thresholds_come_from() -> None:
    text = (REPO / "alert-rules" / "gpu-reclaimer.rules.yml").read_text()
    assert from_rules(text).sample_window == "1m" == SHIPPED.sample_window
    assert from_rules(text.replace("[1m]", "[4s]")).sample_window == "4s"
