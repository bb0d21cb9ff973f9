"""Ranking for engram: lexical and semantic projections, fusion and explanations.

Knows nothing of MCP, HTTP, lifecycle or tenants beyond an opaque scope key: documents
go in, ordered candidates with per-channel contributions come out.
"""

from engram.ranking.documents import IndexDocument, passages, passages_digest
from engram.ranking.encoder import Device, DeviceUnavailable, Encoder, MiniLMEncoder, encode_queries
from engram.ranking.fusion import Contribution, fuse, recency
from engram.ranking.lexical import LexicalHit
from engram.ranking.native import prepare_process
from engram.ranking.profiles import (
    HYBRID_PROFILE,
    LEXICAL_PROFILE,
    FieldWeights,
    FusionConfig,
    FusionMethod,
    Profile,
    ProfileConfig,
    QueryPrecision,
    SemanticConfig,
    ValidTimeConfig,
    config_dict_digest,
)
from engram.ranking.query_time import ValidTimeWindow
from engram.ranking.ranker import EMBED_BATCH, ChannelHits, RankedList, Ranker, VectorSpace
from engram.ranking.semantic import SemanticHit, SemanticUnavailable

__all__ = [
    "EMBED_BATCH",
    "HYBRID_PROFILE",
    "LEXICAL_PROFILE",
    "ChannelHits",
    "Contribution",
    "Device",
    "DeviceUnavailable",
    "Encoder",
    "FieldWeights",
    "FusionConfig",
    "FusionMethod",
    "IndexDocument",
    "LexicalHit",
    "MiniLMEncoder",
    "Profile",
    "ProfileConfig",
    "QueryPrecision",
    "RankedList",
    "Ranker",
    "SemanticConfig",
    "SemanticHit",
    "SemanticUnavailable",
    "ValidTimeConfig",
    "ValidTimeWindow",
    "VectorSpace",
    "config_dict_digest",
    "encode_queries",
    "fuse",
    "passages",
    "passages_digest",
    "prepare_process",
    "recency",
]
