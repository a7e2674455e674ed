"""settle_heap, in a process of its own (freezing the test runner's heap would outlive the
test)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_what_was_built_at_start_is_left_out_of_later_collections() -> None:
    out = _run(
        """
        import gc
        from actuator.heap import settle_heap
        built = [[i] for i in range(10_000)]  # long-lived, like a worker's app
        assert any(o is built for o in gc.get_objects())
        frozen = settle_heap()
        print(frozen >= 10_000, any(o is built for o in gc.get_objects()))
        """
    )
    assert out == "True False"


def test_what_is_made_afterwards_is_still_collected() -> None:
    out = _run(
        """
        import gc, weakref
        from actuator.heap import settle_heap
        settle_heap()
        class Node: pass
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        print(gone() is None)
        """
    )
    assert out == "True"
