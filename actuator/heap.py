"""A server process's heap, settled once it is built: what it built at start is left out of
every later garbage collection.

A worker starts by importing its modules and building its app, its configuration and its
clients: tens of thousands of objects that live as long as it does. CPython's full
collections walk every one of them, and each stopped the actuator's worker for 60-100 ms
with requests in flight (docs/performance.md, "The storm's answers"). `gc.freeze`
moves them to a generation no collection visits; what the process makes afterwards is
collected as before.
"""

from __future__ import annotations

import gc


def settle_heap() -> int:
    """Collect what start-up left behind, then freeze the rest; the objects frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
