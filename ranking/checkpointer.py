"""Background checkpoints: a scope's save runs on its own thread, off the request path.

Why: a semantic checkpoint rewrites the whole scope (vector file, checksum, label map):
tens of milliseconds at 10,000 records, seconds at a million. Taken inline, the apply
that made it due paid for it (an admission answered that much later, the first one after
every restart among them, since a reopened scope's last save is long past), and every
search of the scope waited behind it. Here one thread takes the saves, in the order they
fell due, each scope at most once in the queue; what the save may run beside is the
caller's business (:mod:`ranking.semantic` lets searches run, holds changes off).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger("engram.ranking")


class Checkpointer:
    """Runs ``save(key)`` for each requested key on one background thread."""

    def __init__(self, save: Callable[[str], None], *, name: str = "engram-checkpoint") -> None:
        self._save = save
        self._name = name
        self._changed = threading.Condition()
        self._due: dict[str, None] = {}  # an ordered set: first due, first saved
        self._saving = False
        self._stopped = False
        self._thread: threading.Thread | None = None

    def request(self, key: str) -> bool:
        """Queue ``key`` for a save (once, however often it is asked for). False once
        stopped: the caller then saves for itself."""
        with self._changed:
            if self._stopped:
                return False
            self._due.setdefault(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._changed.notify_all()
        return True

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or being saved; False if ``timeout`` ran out."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._due and not self._saving, timeout)

    def discard(self) -> None:
        """Forget the queued keys (their scopes were dropped); a save in flight finishes."""
        with self._changed:
            self._due.clear()

    def stop(self) -> None:
        """Let a save in flight finish, drop the queue, and end the thread; later
        requests answer False."""
        with self._changed:
            self._stopped = True
            self._due.clear()
            self._changed.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._due or self._stopped)
                if not self._due:
                    return
                key = next(iter(self._due))
                del self._due[key]
                self._saving = True
            try:
                self._save(key)
            except Exception as exc:  # noqa: BLE001 - the scope stays unsaved; its next apply asks again
                logger.error("background checkpoint failed: %s", type(exc).__name__)
            finally:
                with self._changed:
                    self._saving = False
                    self._changed.notify_all()
