"""A batch's vectors join the graph in slices, each with the thread count asked anew: a
bulk load whose writer ends mid-batch gives the rest of the batch every core."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engram.ranking.semantic import ADD_SLICE, SemanticIndex


def test_each_slice_of_a_batch_asks_for_its_threads_and_every_row_lands(tmp_path: Path) -> None:
    n = 2 * ADD_SLICE + 5
    vectors = np.random.default_rng(3).normal(size=(n, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = SemanticIndex(tmp_path, 8)
    asked: list[int] = []

    def threads() -> int:
        asked.append(len(asked))
        return 1 if len(asked) == 1 else 0  # the writer ends after the first slice

    index.apply(
        "s",
        upserts=[(f"r{i}", i, vectors[i : i + 1]) for i in range(n)],
        removals=[],
        through_cursor=1,
        graph_threads=threads,
    )
    assert len(asked) == 3  # ceil(n / ADD_SLICE)
    for i in (0, ADD_SLICE, n - 1):
        assert index.search("s", vectors[i], 1)[0].record_id == f"r{i}"
    assert index.cursor("s") == 1
