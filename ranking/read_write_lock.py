"""A lock that many readers hold at once, or one writer alone.

Why: a scope's vector index serves searches that only read (usearch's ``search`` and
numpy's products release the GIL, so they run in parallel on several cores) and applies
that change it (an ``add`` or ``remove`` must not run while a search walks the graph). A plain lock made every
search of a scope wait for the one before it. A writer that is waiting holds off new
readers, so a steady stream of searches cannot starve an apply.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadWriteLock:
    """Not reentrant: a holder must not take it again, in either mode."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextmanager
    def read(self, timeout: float | None = None) -> Iterator[bool]:
        """Hold the lock shared; yields True. With a ``timeout`` (seconds) it gives up
        after that long and yields False, not holding it."""
        with self._changed:
            acquired = self._changed.wait_for(lambda: not (self._writing or self._writers_waiting), timeout)
            if acquired:
                self._readers += 1
        if not acquired:
            yield False
            return
        try:
            yield True
        finally:
            with self._changed:
                self._readers -= 1
                if self._readers == 0:
                    self._changed.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._changed:
            self._writers_waiting += 1
            try:
                while self._writing or self._readers:
                    self._changed.wait()
            finally:
                self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._changed:
                self._writing = False
                self._changed.notify_all()
