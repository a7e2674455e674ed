"""A store's guard reads counted (the real store answers each), with a hook before each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actuator.store import Store


class CountedGuardReads:
    def __init__(self, store: Store, before: Callable[[int], object] = lambda reads: None):
        self.reads, self._read, self._before = 0, store.guard_facts, before
        store.guard_facts = self  # type: ignore[method-assign]

    def __call__(self, *args: Any, **kw: Any) -> Any:
        self.reads += 1
        self._before(self.reads)  # called with this read's number, from 1
        return self._read(*args, **kw)
