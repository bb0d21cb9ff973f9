"""The CPUs this process may run on: what the native engines' thread pools are sized by.

Why not ``os.cpu_count()``: a container or ``taskset`` may give the process fewer cores
than the machine has, and a pool sized for the machine would then oversubscribe them.
"""

from __future__ import annotations

import os


def available_cpus() -> int:
    """How many CPUs this process may be scheduled on (at least 1)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
