"""Ranking profiles: every tuning constant, pinned, versioned and digested.

A rank receipt names the profile, its version and the digest of its configuration, so a
ranking can be replayed and two rankings compared knowing they used the same knobs. That
only holds if *every* constant that changes an order lives in ``config``; code reads the
constants from here and nowhere else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import rfc8785

LEXICAL = "lexical"
SEMANTIC = "semantic"


@dataclass(frozen=True)
class Profile:
    """A named, versioned ranking configuration; ``config`` is frozen at construction."""

    name: str
    version: str
    config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))

    @property
    def channels(self) -> tuple[str, ...]:
        """The channels this profile requires, in the order they are reported."""
        return tuple(self.config["channels"])

    @property
    def needs_semantic(self) -> bool:
        return SEMANTIC in self.channels

    def config_digest(self) -> str:
        """``sha256:`` + hex digest of the RFC 8785 canonical JSON of ``config``."""
        return "sha256:" + hashlib.sha256(rfc8785.dumps(dict(self.config))).hexdigest()


_LEXICAL_CONFIG: dict[str, Any] = {
    "channels": [LEXICAL],
    # Tantivy's BM25 constants (fixed by the engine, recorded so a receipt states them).
    "bm25_k1": 1.2,
    "bm25_b": 0.75,
    "field_weights": {
        "primary": 3.0,
        "decision": 2.0,
        "evidence": 1.5,
        "context": 1.0,
        "source_refs": 0.5,
    },
    # Every later step (id lookup, exact cosines, fusion, digests) costs time in
    # proportion to this depth: at 100k records 1000 candidates cost about 7 ms a search
    # more than 200. What 200 gives up on the dev collections, hybrid, against 1000:
    # nDCG@10 cisi 0.465 -> 0.463, npl 0.484 -> 0.486, others equal; recall@100 cisi
    # 0.498 -> 0.490, medline 0.946 -> 0.939, others equal (300: 0.493, 0.943; 500:
    # 0.498, 0.945).
    "lexical_cap": 200,
    # final = relevance_weight * normalised relevance + recency_weight * recency
    "relevance_weight": 0.85,
    "recency_weight": 0.15,
    "recency_half_life_ms": 30 * 24 * 3600 * 1000,
    "score_decimals": 6,
}

_HYBRID_CONFIG: dict[str, Any] = {
    **_LEXICAL_CONFIG,
    "channels": [LEXICAL, SEMANTIC],
    "semantic_cap": 200,
    "fusion": {
        "method": "adaptive_convex",
        "base_lexical_weight": 0.5,
        "min_lexical_weight": 0.35,
        "max_lexical_weight": 0.85,
        "confidence_gain": 1.0,
        "confidence_depth": 10,
        "semantic_floor_rank": 100,
        "rrf_k": 60,
        # share of the confidence-weighted reciprocal-rank term in the adaptive blend
        "rank_blend": 0.2,
        # semantic-only candidates below this cosine are dropped (no keyword, no meaning)
        "semantic_only_min_similarity": 0.2,
    },
}

LEXICAL_PROFILE = Profile(name="lexical", version="2", config=_LEXICAL_CONFIG)
HYBRID_PROFILE = Profile(name="lexical_and_semantic", version="4", config=_HYBRID_CONFIG)
