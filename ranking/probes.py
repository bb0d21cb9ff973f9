"""Raw-engine probes: each engine alone on a scope's indexes, for benchmark ratios.

The capacity bench divides what a search costs through the ranker, the engine and MCP
by what the engines underneath cost on the same indexes and queries. A probe asks each
engine for what the ranker asks of it, without the ranker's bookkeeping (fusion, id
decoding, similarity of lexical-only candidates); a bulk probe indexes what a bulk load
indexes, on fresh indexes, without the store or the projection cursors. Probes measure;
they are not a search or projection path, and nothing of the service calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engram.ranking.documents import IndexDocument
from engram.ranking.lexical import LexicalHit


@dataclass(frozen=True)
class RawEngines:
    """One scope's engines, callable alone."""

    #: ``tantivy(query, k)``: the lexical channel's scoring clauses at depth k (no scope
    #: filter, no ids or stored fields read).
    tantivy: Callable[[str, int], Any]
    #: ``lexical_channel(query, k)``: the whole lexical channel (ids and valid times read).
    lexical_channel: Callable[[str, int], list[LexicalHit]]
    #: ``knn(queries, k, ef)``: the HNSW index's search labels (usearch), one row per query
    #: row; ``ef`` None scans every vector exactly instead, as the channel does for a scope
    #: of at most ``SemanticConfig.exact_up_to`` passages.
    knn: Callable[[np.ndarray, int, int | None], np.ndarray]
    #: ``label_record(label)``: the record a passage label belongs to.
    label_record: Callable[[int], str | None]


@dataclass(frozen=True)
class RawBulkIndexing:
    """Both engines alone indexing in bulk, on fresh indexes built as the channels build
    theirs: the anchor a bulk load's rate is divided by."""

    #: ``tantivy(documents)``: add each document, then commit once.
    tantivy: Callable[[Sequence[IndexDocument]], None]
    #: ``usearch(rows)``: add the passage vectors (float32 rows) in one call.
    usearch: Callable[[np.ndarray], None]
