"""Precomputed vectors read for a batch: each document's rows, whether the batch's
documents are consecutive in the file (one slice) or not (refusals leave gaps)."""

from __future__ import annotations

import numpy as np
import pytest

from engram.index_data.readers import VectorSource

ROWS = np.arange(40, dtype=np.float16).reshape(10, 4)


@pytest.mark.parametrize("indexes", [[2, 3, 4, 5], [1, 3, 4], [9], []])
def test_one_row_a_document_in_the_order_asked(indexes: list[int]) -> None:
    got = VectorSource(ROWS).rows(indexes)
    assert len(got) == len(indexes)
    for index, rows in zip(indexes, got):
        assert rows.dtype == np.float32 and rows.shape == (1, 4)
        assert np.array_equal(rows[0], ROWS[index].astype(np.float32))


def test_documents_with_several_passages_get_their_own_rows() -> None:
    source = VectorSource(ROWS, offsets=np.array([0, 2, 5, 10]))
    first, third = source.rows([0, 2])
    assert np.array_equal(first, ROWS[0:2].astype(np.float32))
    assert np.array_equal(third, ROWS[5:10].astype(np.float32))
