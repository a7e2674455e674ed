"""Group commit: the writes that arrive together share one transaction and one fsync, as
databases group their commits.

A writer that finds no commit running leads: it takes every write queued so far (its own
included), runs them in one transaction and hands each writer its own result. Writers that
arrive meanwhile wait for the next group, which one of them leads. Alone, a write commits at
once (no timer, no added wait); under load, a write waits at most for the group before it.

Nothing is answered before its group has committed: a writer returns only after the
transaction holding its write committed, and if the commit fails every writer of the group
gets the error (the webhook then answers 503 and Alertmanager sends again). So an
acknowledgement still means recorded, and a crash at any moment loses only writes that were
never acknowledged.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Ask = TypeVar("Ask")
Answer = TypeVar("Answer")


@dataclass
class _Slot(Generic[Ask, Answer]):
    ask: Ask
    done: bool = False
    answer: Answer | None = None
    error: BaseException | None = field(default=None)


class GroupCommit(Generic[Ask, Answer]):
    """`run` writes a group in one transaction and returns one answer (or the exception
    that ask alone raised) per ask, in order; an exception from `run` itself (the commit
    failed) is every ask's."""

    def __init__(self, run: Callable[[list[Ask]], list[Answer | BaseException]]) -> None:
        self._run = run
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._queue: list[_Slot[Ask, Answer]] = []
        self._leading = False
        self.groups = 0  # groups committed (or failed): for tests and benchmarks
        self.largest = 0  # the most asks one group held

    def submit(self, ask: Ask) -> Answer:
        self._after_fork()
        slot: _Slot[Ask, Answer] = _Slot(ask)
        with self._cond:
            self._queue.append(slot)
            while not slot.done and self._leading:
                self._cond.wait()
            if slot.done:
                return _unwrap(slot)
            self._leading = True  # no group is committing: this writer leads the next
            group, self._queue = self._queue, []
        try:
            answers = self._run([s.ask for s in group])
            if len(answers) != len(group):
                raise RuntimeError(f"a group of {len(group)} got {len(answers)} answers")
        except BaseException as exc:  # the commit failed: no write of the group is recorded
            answers = [exc] * len(group)
        with self._cond:
            for member, answer in zip(group, answers, strict=True):
                if isinstance(answer, BaseException):
                    member.error = answer
                else:
                    member.answer = answer
                member.done = True
            self.groups += 1
            self.largest = max(self.largest, len(group))
            self._leading = False
            self._cond.notify_all()  # the group's writers, and the next group's leader
        return _unwrap(slot)

    def _after_fork(self) -> None:
        """A worker forked from a process that had queued writes starts with none (and a
        fresh lock): the parent's writers are not its own."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._cond = threading.Condition()
            self._queue, self._leading = [], False


def _unwrap(slot: _Slot[Ask, Answer]) -> Answer:
    if slot.error is not None:
        raise slot.error
    return slot.answer  # type: ignore[return-value]
