"""Clients calling a formation's replicas in a loop while the formation loses its
primary or switches over: every answer counted by outcome and, per replica, kept with
when it was asked and when it came back.

Why: the failover tests (`tests/store/test_failover.py`) and the failover benchmark
(`eval/failover_bench.py`) drive the same load through the same events and read the
same things from it (which outcomes were answered, when each replica acknowledged a
write again); one record of the calls serves both.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The outcome of an acknowledged call.
OK = "ok"


@dataclass(frozen=True)
class Answered:
    """One call through one replica: monotonic seconds when it was sent and answered."""

    started: float
    answered: float
    ok: bool


class ClientStorm:
    """``clients`` threads, each calling ``step(client, i)`` for i = 1, 2, ... until
    stopped. A step makes its calls through :meth:`call`, which records them; a step
    that raises is counted as the outcome ``raised:<exception>`` and the client goes on
    (a fault is never a silent gap in the record)."""

    def __init__(self, replicas: int, step: Callable[[int, int], None], clients: int) -> None:
        self.step, self.clients = step, clients
        self.outcomes: Counter[str] = Counter()
        self.calls: list[list[Answered]] = [[] for _ in range(replicas)]
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> ClientStorm:
        self._threads = [threading.Thread(target=self._client, args=(c,)) for c in range(self.clients)]
        for t in self._threads:
            t.start()
        return self

    def stop(self, join_s: float = 120) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=join_s)

    def call(self, replica: int, send: Callable[[], tuple[str, Any]]) -> tuple[str, Any]:
        """``send()`` (one call through replica number ``replica``, answering (outcome,
        value)), recorded."""
        started = time.monotonic()
        outcome, value = send()
        with self.lock:
            self.outcomes[outcome] += 1
            self.calls[replica].append(Answered(started, time.monotonic(), outcome == OK))
        return outcome, value

    def first_ok_after(self, at: float) -> list[float | None]:
        """Per replica, seconds from ``at`` to the answer of its first acknowledged call
        among those sent after ``at`` (None: none yet)."""
        with self.lock:
            firsts = [next((c for c in calls if c.ok and c.started > at), None) for calls in self.calls]
        return [None if c is None else round(c.answered - at, 2) for c in firsts]

    def served_since(self, at: float) -> bool:
        """Every replica acknowledged a call sent after ``at``."""
        return None not in self.first_ok_after(at)

    def ok_gap(self, at: float) -> list[float]:
        """Per replica, seconds from the start of its first call after ``at`` that failed
        to the answer of the first acknowledged one sent after that (0: none failed;
        until now while none has been acknowledged since)."""
        gaps = []
        with self.lock:
            for calls in self.calls:
                failed = next((c.started for c in calls if not c.ok and c.started > at), None)
                if failed is None:
                    gaps.append(0.0)
                    continue
                back = next((c.answered for c in calls if c.ok and c.started > failed), None)
                gaps.append(round((back or time.monotonic()) - failed, 2))
        return gaps

    def _client(self, client: int) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            try:
                self.step(client, i)
            except Exception as exc:  # noqa: BLE001 - counted, and the load goes on
                with self.lock:
                    self.outcomes[f"raised:{type(exc).__name__}"] += 1
                time.sleep(0.1)
