"""Record ids as four 64-bit words, so an index can return them from fast columns.

Why: a search that must name its top few hundred hits by record id would otherwise
fetch each hit's stored document, which decompresses a doc-store block per hit; at 200
hits that was most of the lexical channel's time (0.45 ms for Tantivy's top-k against
about 3 ms with the fetches, at 100k records). Numeric fast columns are read in one
batch by doc address instead.

Only ids in the service's canonical form (``mem_`` + unpadded lowercase base32 of a
32-byte digest) pack; :func:`pack` answers None for any other string and callers keep
the stored field as the source of truth for those.
"""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import Sequence
from typing import cast

import numpy as np

PREFIX = "mem_"
WORDS = 4
_CANONICAL = re.compile(r"mem_[a-z2-7]{52}\Z")
_LAYOUT = struct.Struct(">4Q")
_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz234567", dtype=np.uint8)
_SYMBOL_VALUES = np.zeros(256, dtype=np.uint8)
_SYMBOL_VALUES[_ALPHABET] = np.arange(32, dtype=np.uint8)
_SHIFTS = np.array([4, 3, 2, 1, 0], dtype=np.uint8)


def pack(record_id: str) -> tuple[int, int, int, int] | None:
    """The id's 32 digest bytes as four big-endian u64 words, or None if not canonical."""
    return pack_many([record_id])[0]


def pack_many(record_ids: Sequence[str]) -> list[tuple[int, int, int, int] | None]:
    """:func:`pack` of each id, in numpy (a batch of documents packs its ids at once):
    an id is canonical when it matches the form and its last symbol's four padding bits
    are zero (only then is it the unique encoding of its bytes)."""
    out: list[tuple[int, int, int, int] | None] = [None] * len(record_ids)
    canonical = [i for i, rid in enumerate(record_ids) if _CANONICAL.match(rid)]
    if not canonical:
        return out
    text = "".join(record_ids[i][len(PREFIX) :] for i in canonical).encode("ascii")
    symbols = _SYMBOL_VALUES[np.frombuffer(text, dtype=np.uint8)].reshape(len(canonical), 52)
    bits = ((symbols[:, :, None] >> _SHIFTS) & 1).astype(np.uint8).reshape(len(canonical), 260)
    unique = cast(list[bool], (~bits[:, 256:].any(axis=1)).tolist())
    words = np.packbits(bits[:, :256], axis=1).view(">u8").reshape(len(canonical), WORDS).tolist()
    for i, ok, row in zip(canonical, unique, words):
        if ok:
            out[i] = (row[0], row[1], row[2], row[3])
    return out


def unpack(words: tuple[int, ...] | list[int]) -> str:
    """The canonical record id of four words (inverse of :func:`pack`)."""
    return PREFIX + base64.b32encode(_LAYOUT.pack(*words)).decode("ascii").rstrip("=").lower()


def unpack_many(rows: Sequence[Sequence[int]]) -> list[str]:
    """:func:`unpack` for many rows at once, in numpy: the standard library's base32 is
    pure Python, about 7 us an id, as slow as the stored-document fetch it replaces."""
    if not len(rows):
        return []
    raw = np.asarray(rows, dtype=">u8").view(np.uint8).reshape(len(rows), 32)
    bits = np.unpackbits(raw, axis=1)  # 256 bits; base32 reads 52 groups of 5 (4 pad bits)
    bits = np.concatenate([bits, np.zeros((len(rows), 4), dtype=np.uint8)], axis=1)
    symbols = bits.reshape(len(rows), 52, 5) @ np.array([16, 8, 4, 2, 1], dtype=np.uint8)
    text = _ALPHABET[symbols].tobytes().decode("ascii")
    return [PREFIX + text[i * 52 : (i + 1) * 52] for i in range(len(rows))]
