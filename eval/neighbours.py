"""Exact nearest neighbours and recall against them: the ground truth every HNSW
figure (engine, raw usearch, hnswlib) is measured against."""

from __future__ import annotations

import numpy as np


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int, chunk: int = 100_000) -> np.ndarray:
    """Exact top-k inner-product labels by brute force, streaming over ``vectors``."""
    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    for start in range(0, len(vectors), chunk):
        block = np.asarray(vectors[start : start + chunk], dtype=np.float32)
        scores = queries @ block.T
        ids = np.arange(start, start + len(block))[None, :].repeat(len(queries), 0)
        all_s = np.concatenate([best_s, scores], axis=1)
        all_i = np.concatenate([best_i, ids], axis=1)
        top = np.argpartition(-all_s, k - 1, axis=1)[:, :k]
        best_s = np.take_along_axis(all_s, top, 1)
        best_i = np.take_along_axis(all_i, top, 1)
    return best_i


def recall_at_10(labels: np.ndarray, exact: np.ndarray) -> float:
    return round(float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(labels.tolist(), exact.tolist())])), 4)
