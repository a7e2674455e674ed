"""A call that may hang (a wedged driver) is bounded: the caller gets None after the
timeout, and while the call is stuck no second thread is started."""

from __future__ import annotations

import threading
import time

from exporter.guard import BoundedCall


def test_an_answer_within_the_timeout_is_returned() -> None:
    call = BoundedCall(lambda: 7, timeout=2.0)
    try:
        assert call() == 7 and not call.stuck
        assert call() == 7  # the same worker answers again
    finally:
        call.close()


def test_a_hung_call_gives_none_and_later_calls_do_not_pile_up_threads() -> None:
    release = threading.Event()
    started = []

    def wedged() -> int:
        started.append(time.monotonic())
        release.wait(10)
        return 1

    call = BoundedCall(wedged, timeout=0.2)
    try:
        began = time.monotonic()
        assert call() is None
        assert 0.2 <= time.monotonic() - began < 5
        assert call.stuck
        threads = threading.active_count()
        for _ in range(5):
            assert call() is None  # at once: no new call while one is stuck
        assert len(started) == 1 and threading.active_count() == threads
        release.set()
        deadline = time.monotonic() + 5
        while call.stuck and time.monotonic() < deadline:
            time.sleep(0.01)
        assert call() == 1 and len(started) == 2  # unstuck: called again
    finally:
        release.set()
        call.close()
