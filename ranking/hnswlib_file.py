"""Vectors read out of an hnswlib index file, for migrating data of earlier releases.

Why: releases before the usearch engine saved each scope's vectors as an hnswlib index
(``vectors-<generation>.bin``, meta.json without a ``graph`` entry). Opening such a scope
rebuilds it with the current engine from the vectors in that file; reading them here,
with numpy, spares the service a compiled dependency it would need only once.

The format (hnswlib 0.8 ``saveIndex``): a 96-byte little-endian header, then the level-0
block of ``count`` fixed-size elements, each holding its level-0 links, then the vector
(``dim`` float32 at ``data_offset``), then its label (uint64 at ``label_offset``); the
upper-level links follow and are not needed. The file is memory-mapped and vectors are
copied out only when asked for, so migrating a million-vector scope does not hold the
file in memory.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_HEADER = struct.Struct("<QQQQQQiIQQQdQ")  # offsetLevel0 .. ef_construction


class HnswlibVectors:
    """The vectors of one hnswlib file, by label (deleted elements included: the caller
    asks only for the labels it knows as live)."""

    def __init__(self, path: Path) -> None:
        """Raises ValueError when the file is not an hnswlib index of float32 vectors."""
        data = np.memmap(path, dtype=np.uint8, mode="r")
        if len(data) < _HEADER.size:
            raise ValueError("hnswlib file shorter than its header")
        _, _, count, size, label_offset, data_offset, *_ = _HEADER.unpack_from(data[: _HEADER.size].tobytes(), 0)
        self.dim = (label_offset - data_offset) // 4  # the vector sits between the links and the label
        if self.dim <= 0 or label_offset + 8 > size or _HEADER.size + count * size > len(data):
            raise ValueError("hnswlib header does not describe this file")
        self._block = data[_HEADER.size : _HEADER.size + count * size].reshape(count, size)
        self._data_offset = data_offset
        labels = np.ascontiguousarray(self._block[:, label_offset : label_offset + 8]).view("<u8").ravel()
        self._row = {int(label): row for row, label in enumerate(labels.tolist())}

    def __contains__(self, label: int) -> bool:
        return label in self._row

    def rows(self, labels: Sequence[int] | np.ndarray) -> np.ndarray:
        """float32 vectors of ``labels`` (all present), one row each, in order."""
        picked = self._block[
            [self._row[label] for label in labels], self._data_offset : self._data_offset + 4 * self.dim
        ]
        return np.ascontiguousarray(picked).view("<f4").reshape(len(labels), self.dim)
