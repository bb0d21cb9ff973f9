"""Ranking for engram: lexical and semantic projections, fusion and explanations.

Knows nothing of MCP, HTTP, lifecycle or tenants beyond an opaque scope key: documents
go in, ordered candidates with per-channel contributions come out.
"""

from engram.ranking.documents import IndexDocument, passages, passages_digest
from engram.ranking.encoder import Device, DeviceUnavailable, Encoder, MiniLMEncoder
from engram.ranking.fusion import Contribution, fuse, recency
from engram.ranking.profiles import HYBRID_PROFILE, LEXICAL_PROFILE, Profile, config_dict_digest
from engram.ranking.ranker import RankedList, Ranker, VectorSpace
from engram.ranking.semantic import SemanticUnavailable

__all__ = [
    "Contribution",
    "Device",
    "DeviceUnavailable",
    "Encoder",
    "HYBRID_PROFILE",
    "IndexDocument",
    "LEXICAL_PROFILE",
    "MiniLMEncoder",
    "Profile",
    "RankedList",
    "Ranker",
    "SemanticUnavailable",
    "VectorSpace",
    "config_dict_digest",
    "fuse",
    "passages",
    "passages_digest",
    "recency",
]
