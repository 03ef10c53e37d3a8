"""This process's writers of one SQLite file, one at a time, in the order they came.

SQLite lets one writer in at a time; the others wait in its busy handler, which sleeps
and tries again (1 ms, 2, 5, 10 … then 100 ms between tries) while the lock may be free
long before, and lets a writer that has just arrived in ahead of one that has waited for
a second. With the door's requests and the runner's threads all writing, that made
seconds-long waits out of millisecond transactions (a p99 of 1-3 s at 16 connections).
Queued here first, a writer is woken the moment the one before it is done, and the
writers of this process reach SQLite one at a time, so its busy handler is left only for
other processes (a management command beside the server).
"""

from __future__ import annotations

import threading
from collections import deque


class WriterQueue:
    """A lock handed to the writers waiting for it in the order they asked."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._held = False
        self._waiting: deque[threading.Event] = deque()

    def acquire(self, timeout: float) -> bool:
        """Wait for this writer's turn; False if it did not come within ``timeout`` seconds."""
        with self._guard:
            if not self._held:
                self._held = True
                return True
            turn = threading.Event()
            self._waiting.append(turn)
        if turn.wait(timeout):
            return True
        with self._guard:
            if turn.is_set():  # handed over as it gave up: its turn all the same
                return True
            self._waiting.remove(turn)
            return False

    def release(self) -> None:
        """Hand the lock to the writer that has waited longest (it stays held), or free it."""
        with self._guard:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._held = False


_queues: dict[str, WriterQueue] = {}
_queues_guard = threading.Lock()


def writer_queue(name: str) -> WriterQueue:
    """The queue for one database file (its name as settings give it)."""
    with _queues_guard:
        return _queues.setdefault(name, WriterQueue())
