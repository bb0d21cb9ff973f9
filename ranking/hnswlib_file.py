"""Vectors read out of an hnswlib index file, for migrating data of earlier releases.

Why: releases before the usearch engine saved each scope's vectors as an hnswlib index
(``vectors-<generation>.bin``, meta.json without a ``graph`` entry). Opening such a scope
rebuilds it with the current engine from the vectors in that file; reading them here,
with numpy, spares the service a compiled dependency it would need only once.

The format (hnswlib 0.8 ``saveIndex``): a 96-byte little-endian header, then the level-0
block of ``count`` fixed-size elements, each holding its level-0 links, then the vector
(``dim`` float32 at ``data_offset``), then its label (uint64 at ``label_offset``); the
upper-level links follow and are not needed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_HEADER = struct.Struct("<QQQQQQiIQQQdQ")  # offsetLevel0 .. ef_construction


@dataclass(frozen=True)
class HnswlibVectors:
    """What an hnswlib file holds: the dimension, and label -> float32 vector of every
    element (deleted ones included: the caller keeps the labels it knows as live)."""

    dim: int
    rows: dict[int, np.ndarray]


def read_hnswlib_vectors(path: Path) -> HnswlibVectors:
    """Raises ValueError when the file is not an hnswlib index of float32 vectors."""
    data = path.read_bytes()
    if len(data) < _HEADER.size:
        raise ValueError("hnswlib file shorter than its header")
    _, _, count, size, label_offset, data_offset, *_ = _HEADER.unpack_from(data, 0)
    dim = (label_offset - data_offset) // 4  # the vector sits between the links and the label
    if (dim <= 0 or label_offset + 8 > size or _HEADER.size + count * size > len(data)):
        raise ValueError("hnswlib header does not describe this file")
    block = np.frombuffer(data, dtype=np.uint8, count=count * size, offset=_HEADER.size).reshape(count, size)
    labels = block[:, label_offset : label_offset + 8].copy().view("<u8").ravel()
    vectors = block[:, data_offset : data_offset + 4 * dim].copy().view("<f4")
    return HnswlibVectors(dim, {int(label): vectors[row] for row, label in enumerate(labels.tolist())})
