"""Where the embedding model runs: a closed set of choices shared by the settings (the
CLI and ``ENGRAM_DEVICE``) and the encoder, kept here so that reading the settings
imports no machine-learning library."""

from __future__ import annotations

from enum import StrEnum


class Device(StrEnum):
    """Where torch runs the model; AUTO picks CUDA, then MPS, then the CPU."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"
    MPS = "mps"
