"""The background step that completes physical purges a forget left `pending`.

Requests coalesce: however many forgets schedule a sweep while one runs, one more
sweep follows, and it purges every record still listed as pending in the store. The
list lives in the store, so a sweep cut short by a crash is redone at the next start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger("engram.sweeper")


class Sweeper:
    def __init__(self) -> None:
        self._sweep: Callable[[], object] = lambda: None
        self._wanted = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def schedule(self, sweep: Callable[[], object]) -> None:
        """Run `sweep` soon in the background thread (once more if one is running)."""
        with self._lock:
            if self._stopped:
                return
            self._sweep = sweep
            self._wanted.set()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="engram-sweeper", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while self._wanted.is_set() and not self._stopped:
            self._wanted.clear()
            try:
                self._sweep()
            except Exception as exc:  # noqa: BLE001 - retried at the next schedule or start
                logger.warning("purge sweep failed: %s", type(exc).__name__)
                return

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no sweep is running (for operators and tests)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self.wait_idle()
