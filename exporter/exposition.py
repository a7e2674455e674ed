"""The exporter's own text exposition, for its hot path.

A scrape of a busy node is thousands of samples whose label sets hardly change between
scrapes. prometheus_client validates and escapes every label of every sample on every
scrape; here each label set's text is built once and kept while its series lives, and
values are formatted through a small cache. The output is byte for byte what
prometheus_client's `generate_latest` (Prometheus text 0.0.4) and OpenMetrics
`generate_latest` produce for the same families (tests/exporter/test_exposition.py), and
`Family.to_metric()` gives the library's own objects for everything else (name[] filters,
other formats).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

Kind = Literal["gauge", "counter"]


@dataclass
class Family:
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def add(self, values: Sequence[str], value: float) -> None:
        self.samples.append((values if type(values) is tuple else tuple(values), value))

    def to_metric(self) -> Metric:
        kind = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        metric = kind(self.name, self.help, labels=list(self.labels))
        for values, value in self.samples:
            metric.add_metric(list(values), value)
        return metric


# Bounded small on purpose: under process churn each new process brings values no other
# series shares (its start time, its counters), and a larger cache only held those: at 16,384
# entries it grew the exporter by 3.7 MiB over the first hours (benchmarks/churn_soak.py).
# The values worth caching (utilisation steps, memory sizes, 0 and 1) are few and recur.
@lru_cache(maxsize=2048)
def _cached_value(value: float) -> str:
    return floatToGoString(value)


def _value(value: float) -> str:
    # 0.0 == -0.0 (and 1 == 1.0 == True) share a cache key; only zero's sign would differ.
    return floatToGoString(value) if value == 0 else _cached_value(value)


def _escape_value(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Exposition:
    """Renders families; keeps each live series' line between renders, re-formatted only
    when its value changed."""

    def __init__(self) -> None:
        # family name -> label values -> (value, the label text, the sample's line)
        self._lines: dict[str, dict[tuple[str, ...], tuple[float, str, str]]] = {}
        self._order: dict[tuple[str, ...], list[tuple[int, str]]] = {}

    def render(self, families: Iterable[Family], *, openmetrics: bool = False) -> bytes:
        out: list[str] = []
        kept: dict[str, dict[tuple[str, ...], tuple[float, str, str]]] = {}
        for family in families:
            if openmetrics:
                name = family.name
                doc = _escape_value(family.help)
            else:
                name = family.name + "_total" if family.kind == "counter" else family.name
                doc = family.help.replace("\\", r"\\").replace("\n", r"\n")
            out.append(f"# HELP {name} {doc}\n# TYPE {name} {family.kind}\n")
            sample = family.name + "_total" if family.kind == "counter" else family.name
            old = self._lines.get(family.name, {})
            new = kept.setdefault(family.name, {})
            order = self._sorted_labels(family.labels)
            for values, value in family.samples:
                cached = old.get(values)
                # 0.0 == -0.0 and NaN != NaN: both re-formatted, never reused wrongly. A new
                # value keeps the series' label text: only the value is formatted again.
                if cached is None:
                    labels = self._label_string(order, values)
                    cached = (value, labels, f"{sample}{labels} {_value(value)}\n")
                elif cached[0] != value or value == 0:
                    labels = cached[1]
                    cached = (value, labels, f"{sample}{labels} {_value(value)}\n")
                new[values] = cached
                out.append(cached[2])
        if openmetrics:
            out.append("# EOF\n")
        self._lines = kept  # series that were not rendered this time are dropped
        return "".join(out).encode("utf-8")

    def _sorted_labels(self, labels: tuple[str, ...]) -> list[tuple[int, str]]:
        order = self._order.get(labels)
        if order is None:
            order = sorted(enumerate(labels), key=lambda item: item[1])
            self._order[labels] = order
        return order

    @staticmethod
    def _label_string(order: list[tuple[int, str]], values: tuple[str, ...]) -> str:
        if not order:
            return ""
        pairs = ",".join(f'{name}="{_escape_value(values[i])}"' for i, name in order)
        return "{" + pairs + "}"
