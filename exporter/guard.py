"""Bound a call that may hang (a wedged driver) without piling up threads.

One worker thread runs the call. If it does not answer within the timeout the caller gets
``None``; while that call is still stuck, later calls return ``None`` at once instead of
starting another thread.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BoundedCall(Generic[T]):
    def __init__(self, function: Callable[[], T], timeout: float) -> None:
        self.function = function
        self.timeout = timeout
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="nvml"
        )
        self._pending: concurrent.futures.Future[T] | None = None
        self._lock = threading.Lock()

    @property
    def stuck(self) -> bool:
        return self._pending is not None and not self._pending.done()

    def __call__(self) -> T | None:
        with self._lock:
            if self.stuck:
                return None
            self._pending = self._executor.submit(self.function)
            future = self._pending
        try:
            return future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            return None

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
