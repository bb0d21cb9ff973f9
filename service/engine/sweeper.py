"""The background step that completes physical purges a forget left `pending`.

A forget in a scope larger than :attr:`PurgeSchedule.inline_records` answers once the
record is out of every search (deleted from the lexical index, hidden in the vector
graph) and leaves the rewrite of the scope's files, which grows with the scope, to this
sweeper. A requested sweep starts :attr:`PurgeSchedule.delay_s` later, so forgets that
follow within that time share one rewrite. Requests coalesce: however many forgets
schedule a sweep while one waits or runs, one more sweep follows, and it purges every
record still listed as pending in the store. The
list lives in the store, so a sweep cut short by a crash is redone at the next start.
A sweep that fails, or leaves purges owed (an index that cannot be written: a full
disk), is tried again after a pause that doubles up to :data:`RETRY_MAX_S`, so the
purge completes in the same process once the fault goes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger("engram.sweeper")

RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0
#: The sweeper thread's nice value (Linux sets it per thread).
SWEEP_NICENESS = 10


@dataclass(frozen=True)
class PurgeSchedule:
    """When a forget's physical purge runs (``Settings.inline_purge_records`` and
    ``Settings.purge_delay_s``): before the forget answers, in a scope of at most
    ``inline_records`` live records; else in the background, ``delay_s`` after it."""

    inline_records: int = 250
    delay_s: float = 5.0


#: The schedule of ``Settings``' defaults.
DEFAULT_PURGE = PurgeSchedule()


class Sweeper:
    def __init__(self, delay_s: float = 0.0) -> None:
        self._delay_s = delay_s
        self._sweep: Callable[[], bool] = lambda: True
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def schedule(self, sweep: Callable[[], bool]) -> None:
        """Run `sweep` soon in the background thread (once more if one is running), and
        again later while it fails or returns False (purges still owed)."""
        with self._lock:
            if self._stopping.is_set():
                return
            self._sweep = sweep
            self._wanted.set()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="engram-sweeper", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        # A rewrite is CPU work nobody waits on: below the calls' threads, so that on a
        # busy machine it slows down rather than the searches and admissions beside it
        # (threads Tantivy and usearch start from this one inherit the priority).
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SWEEP_NICENESS)
        pause = RETRY_FIRST_S
        while not self._stopping.is_set():
            with self._lock:
                if not self._wanted.is_set():
                    # Under the lock: a request made from now on starts a new thread.
                    self._thread = None
                    return
            if self._stopping.wait(self._delay_s):  # forgets meanwhile share this sweep
                return
            self._wanted.clear()
            try:
                done = self._sweep()
            except Exception as exc:  # noqa: BLE001 - tried again after a pause
                logger.warning("purge sweep failed: %s", type(exc).__name__)
                done = False
            if done:
                pause = RETRY_FIRST_S
                continue
            self._wanted.set()
            if self._stopping.wait(pause):
                return
            pause = min(2 * pause, RETRY_MAX_S)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no sweep is running or owed (for operators and tests)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
        self.wait_idle()
