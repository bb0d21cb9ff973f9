"""Helpers of the ranking tests: a cheap deterministic encoder and a document factory.

Kept out of ``conftest.py`` so test modules can import them under a name no other test
directory's conftest shadows (pytest imports every ``conftest`` under the same name).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engram.ranking import IndexDocument


class HashingTestEncoder:
    """Test-only encoder: bag of hashed lowercase words, L2-normalised (no model needed).

    Texts sharing words get a positive cosine, so the semantic channel behaves like a
    crude lexical matcher; enough to exercise projection, purge and fusion plumbing.
    """

    dim = 64
    model_id = "test/hashing-64"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                h = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big")
                out[row, h % self.dim] += 1.0 if (h >> 8) & 1 else -1.0
            norm = np.linalg.norm(out[row])
            out[row] = out[row] / norm if norm > 0 else 0.0
            if norm == 0:
                out[row, 0] = 1.0
        return out


def doc(scope: str, record_id: str, primary: str, *, valid_time_ms: int = 0, **fields: str) -> IndexDocument:
    """An IndexDocument with empty optional fields."""
    return IndexDocument(
        scope_key=scope,
        record_id=record_id,
        primary=primary,
        decision=fields.get("decision", ""),
        evidence=fields.get("evidence", ""),
        context=fields.get("context", ""),
        source_refs=fields.get("source_refs", ""),
        valid_time_ms=valid_time_ms,
    )


def bytes_under(root: Path, needle: bytes) -> list[Path]:
    """Every file under `root` whose raw bytes contain `needle` (for purge checks)."""
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]
