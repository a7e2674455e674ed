"""Actuator settings shared by the tests that start a real actuator."""

from __future__ import annotations

from typing import Any

# Fast timings for the suite; the shipped defaults are tested in test_policy.py.
FAST_POLICY: dict[str, Any] = {
    "mode": "enforce",
    "defaults": {
        "grace": "0.5s",
        "min_runtime": "0s",  # the suite's workloads start idle on purpose
        "term_timeout": "2s",
        "kill_timeout": "3s",
        "release_timeout": "3s",
    },
    "idle": {"cpu_window": "0.3s", "log_quiet_for": "1s", "sm_window": "1s"},
    # Tests run as root: lower the protection explicitly (the shipped default protects root).
    "protect": {"protect_root": False, "protected_uid_below": 0},
    "limits": {"terminations_per_node_per_hour": 100, "terminations_per_minute": 100},
    "breaker": {"min_flagged": 1000},
    "reconciler": {"interval": "0.1s", "lease_ttl": "2s"},
    # A tree that held a connection is unknown until watched this long (60 s shipped).
    "node": {"network_window": "1s"},
    # No owner channel in these tests: the grace starts at the (undelivered) notice. The
    # notice gate itself is tested in test_notice_gate.py with real receivers.
    "notice": {"required": False},
}
