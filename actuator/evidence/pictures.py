"""An evidence picture for a case: asked of Prometheus, drawn, kept with the case.

A picture is evidence for the owner, never a gate: when Prometheus does not answer in
time, holds nothing for the process, or matplotlib is missing, the notice goes without
one (logged) and the decision is unchanged."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from actuator.evidence import chart
from actuator.evidence.fetch import FetchError, fetch
from actuator.evidence.links import PictureLinks, PictureRef
from actuator.evidence.queries import Subject, idle_query, panels, step_for, window
from actuator.evidence.rules import ThresholdsUnknown
from actuator.models import Case
from actuator.notifications.notice import ProvenFacts
from actuator.prometheus_api import RangeQueries
from exporter.thresholds import Thresholds

log = logging.getLogger(__name__)
# After Prometheus fails (or is too slow), notices go without pictures this long: each would
# otherwise wait out the picture's time budget in the reconciler's pass.
RETRY_AFTER = 60.0


class PictureStore(Protocol):
    def save_picture(self, case_id: int, created: float, png: bytes) -> int: ...


@dataclass(frozen=True)
class Picture:
    id: int
    png: bytes
    url: str  # '' without a public URL (e-mail still carries the picture itself)


class EvidencePictures:
    def __init__(
        self,
        prom: RangeQueries,
        store: PictureStore,
        thresholds: Thresholds | Callable[[], Thresholds],
        *,
        span: float,
        budget: float = 5.0,
        links: PictureLinks | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.prom, self.store, self.thresholds = prom, store, thresholds
        self.span, self.budget, self.links, self.clock = span, budget, links, clock
        self._away_until = float("-inf")

    def take(self, case: Case) -> Picture | None:
        facts = ProvenFacts.of_case(case)
        if facts is None:
            return None
        subject = Subject(case.uuid, case.pid, case.start_time)
        now = self.clock()
        if now < self._away_until:  # Prometheus just failed: notices do not wait on it again
            return None
        start, end = window(subject, now, self.span)
        try:
            # The values the rules Prometheus evaluates (evidence/rules.py), or no picture:
            # shading by other values could show a busy process as idle.
            thresholds = self.thresholds() if callable(self.thresholds) else self.thresholds
        except ThresholdsUnknown as exc:
            log.warning("case %d: no evidence picture: %s", case.id, exc)
            return None
        try:
            evidence = fetch(
                self.prom,
                panels(subject, thresholds),
                idle_query(subject),
                start,
                end,
                step_for(start, end),
                budget=self.budget,
            )
        except FetchError as exc:
            self._away_until = now + RETRY_AFTER
            log.warning(
                "case %d: no evidence picture (none for %gs), Prometheus: %s",
                case.id,
                RETRY_AFTER,
                exc,
            )
            return None
        if evidence.empty:
            log.info("case %d: no evidence picture, Prometheus holds no series for it", case.id)
            return None
        title = f"PID {facts.pid} on {facts.node}, GPU {facts.gpu}: the last {_span(end - start)}"
        try:
            png = chart.render(evidence, title)
        except chart.ChartUnavailable as exc:
            log.warning("case %d: no evidence picture: %s", case.id, exc)
            return None
        picture_id = self.store.save_picture(case.id, now, png)
        url = self.links.url(PictureRef(case.id, picture_id)) if self.links else ""
        return Picture(picture_id, png, url)


def _span(seconds: float) -> str:
    """The history a picture covers, in the unit people would say it in (never more than
    there is: half a minute is 30 s, not 1 min)."""
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 90:
        return f"{round(seconds / 60)} min"
    return f"{max(1, round(seconds))} s"
