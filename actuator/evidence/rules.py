"""The thresholds a picture shades by, read from the rules Prometheus evaluates now.

`idle.rules_file` is what the actuator's live re-check judges by; a picture, though, shows
what the rules saw, and a site may run other values in Prometheus than the file the
actuator names. Shading a busy process as idle by the wrong values would be a false fact,
so the picture reads the recording rules Prometheus actually evaluates (its rules API,
`/api/v1/rules?type=record`) and parses them as the rules file is parsed
(exporter/thresholds.py). When that fails (Prometheus away, rules missing or ambiguous) no
picture is drawn, and the log says why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from exporter.thresholds import Thresholds, ThresholdsError, from_rules

CACHE_S = 300.0  # rules change with a reload, not per notice: asked at most this often


class ThresholdsUnknown(Exception):
    """The thresholds Prometheus evaluates cannot be told now (the message says why)."""


def thresholds_of(rules_api: Any) -> Thresholds:
    """The thresholds in the answer of Prometheus' rules API (pure)."""
    if not isinstance(rules_api, dict) or rules_api.get("status") != "success":
        raise ThresholdsUnknown("Prometheus' rules API did not answer with success")
    queries = [
        str(rule.get("query", ""))
        for group in rules_api.get("data", {}).get("groups", []) or []
        for rule in group.get("rules", []) or []
        if isinstance(rule, dict)
    ]
    try:
        return from_rules("\n".join(queries), source="the rules Prometheus evaluates")
    except ThresholdsError as exc:
        raise ThresholdsUnknown(str(exc)) from None


class EvaluatedThresholds:
    """`current()`: the thresholds of the rules Prometheus runs, asked at most every
    CACHE_S (a failure is not cached: the next picture asks again)."""

    def __init__(
        self,
        ask: Callable[[], Any],
        *,
        cache_s: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ask, self.cache_s, self.clock = ask, cache_s, clock
        self._lock = threading.Lock()
        self._known: tuple[float, Thresholds] | None = None

    def current(self) -> Thresholds:
        with self._lock:
            if self._known is not None and self.clock() - self._known[0] < self.cache_s:
                return self._known[1]
        try:
            answer = self.ask()
        except Exception as exc:  # any transport failure: unknown, said in the log
            raise ThresholdsUnknown(f"Prometheus' rules API: {exc}") from None
        found = thresholds_of(answer)
        with self._lock:
            self._known = (self.clock(), found)
        return found


def rules_api(base_url: str, timeout: float) -> Callable[[], Any]:
    """A reader of `base_url`'s recording rules (requests, no retries: a notice's picture
    waits for Prometheus at most its timeout)."""
    import requests

    url = base_url.rstrip("/") + "/api/v1/rules"

    def ask() -> Any:
        response = requests.get(url, params={"type": "record"}, timeout=timeout)
        response.raise_for_status()
        return response.json()

    return ask
