"""Per-principal token buckets: RATE_LIMITED before a call reaches the engine.

Why per principal (within its tenant): one noisy agent identity must not starve the
others, and the principal is the host-bound actor the agent cannot change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucketLimiter:
    """`rate` tokens per second, bursts up to `burst`; `rate <= 0` disables limiting."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = float(rate)
        self.burst = max(1, int(burst))
        self._clock = clock
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: tuple[str, str]) -> bool:
        if self.rate <= 0:
            return True
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                return False
            self._buckets[key] = (tokens - 1.0, now)
            if len(self._buckets) > 100_000:  # bound memory: drop full buckets
                self._buckets = {k: v for k, v in self._buckets.items() if v[0] < self.burst}
            return True
