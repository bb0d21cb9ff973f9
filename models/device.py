"""Where the work runs: the embedding model's device, a closed set of choices shared by
the settings (the CLI and ``ENGRAM_DEVICE``) and the encoder, and the cores this process
may use. Kept here so that reading the settings, or deciding how a command spreads its
work, imports no machine-learning library."""

from __future__ import annotations

import os
from enum import StrEnum


def usable_cores() -> int:
    """The cores this process may run on (its affinity, where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class Device(StrEnum):
    """Where torch runs the model; AUTO picks CUDA, then MPS, then the CPU."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"
    MPS = "mps"
