"""The background step that completes physical purges a forget left `pending`.

Requests coalesce: however many forgets schedule a sweep while one runs, one more
sweep follows, and it purges every record still listed as pending in the store. The
list lives in the store, so a sweep cut short by a crash is redone at the next start.
A sweep that fails, or leaves purges owed (an index that cannot be written: a full
disk), is tried again after a pause that doubles up to :data:`RETRY_MAX_S`, so the
purge completes in the same process once the fault goes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger("engram.sweeper")

RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0


class Sweeper:
    def __init__(self) -> None:
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
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="engram-sweeper", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        pause = RETRY_FIRST_S
        while self._wanted.is_set() and not self._stopping.is_set():
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
