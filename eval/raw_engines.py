"""The raw engines alone on a BEIR collection: the anchors the data READMEs publish,
and a keyword-only peer's ranking.

Why: the data READMEs give only the raw engines' mean nDCG@10 (Tantivy BM25, exact
MiniLM, naive RRF of the two), the floor hybrid must beat; a paired test of hybrid
against them needs their runs query by query. They are rebuilt here as the READMEs
describe them, with none of the service in the way: Tantivy's ``en_stem`` BM25 over
title + text in a fresh in-memory index, the exact cosine of the model's vectors of
title + text (no passages, no HNSW index, no fusion constants), and reciprocal rank
fusion (k 60) of their top 100. Beside them, ``raw_fts5``: SQLite FTS5 ranking as a
keyword-only memory server does (:mod:`eval.fts5_peer`). The two keyword anchors need
no model, so they run without one.

A query reaches Tantivy's parser lowercased and with every character that is not a
letter, a digit or a space replaced by a space, so no user text is query syntax (NPL's
capitalised AND, OR and NOT would otherwise be operators).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tantivy

from .fts5_peer import fts5_search

DEPTH = 100
RRF_K = 60
#: The anchors that need no model.
KEYWORD_RUNS = ("raw_bm25", "raw_fts5")
RUNS = (*KEYWORD_RUNS, "raw_minilm", "raw_rrf")
_BATCH = 64


def _bm25(docs: Sequence[tuple[str, str]]) -> Any:
    """A search function over ``docs`` ((id, text) pairs): query -> top ids."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    index = tantivy.Index(builder.build())
    writer = index.writer()
    for doc_id, text in docs:
        writer.add_document(tantivy.Document(body=text, id=doc_id))
    writer.commit()
    index.reload()
    searcher = index.searcher()

    def search(query: str) -> list[str]:
        words = "".join(c if c.isalnum() or c.isspace() else " " for c in query).lower()
        if not words.split():
            return []
        hits = searcher.search(index.parse_query(words, ["body"]), DEPTH).hits
        return [searcher.doc(address)["id"][0] for _, address in hits]

    return search


def reciprocal_rank_fusion(*lists: Sequence[str], k: int = RRF_K) -> list[str]:
    """Ids by the sum of 1 / (k + rank) over the lists (ties: id ascending)."""
    fused: dict[str, float] = {}
    for ranked in lists:
        for rank, doc_id in enumerate(ranked, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (k + rank)
    return sorted(fused, key=lambda d: (-fused[d], d))


def raw_runs(
    docs: Sequence[tuple[str, str]], queries: Mapping[str, str], encoder: Any = None
) -> dict[str, dict[str, list[str]]]:
    """The anchors' runs (query id -> doc ids, best first) of ``queries`` over ``docs``
    ((id, title + text) pairs): ``raw_bm25`` and ``raw_fts5`` always; with ``encoder``
    (the service's model, :class:`ranking.Encoder`, unit vectors out) also
    ``raw_minilm`` and ``raw_rrf``."""
    names = RUNS if encoder is not None else KEYWORD_RUNS
    out: dict[str, dict[str, list[str]]] = {name: {} for name in names}
    qids = list(queries)
    if not docs or not qids:
        return out
    bm25, fts5 = _bm25(docs), fts5_search(docs, DEPTH)
    for qid in qids:
        out["raw_bm25"][qid] = bm25(queries[qid])
        out["raw_fts5"][qid] = fts5(queries[qid])
    if encoder is None:
        return out
    ids = [doc_id for doc_id, _ in docs]
    texts = [text for _, text in docs]
    matrix = np.vstack(
        [np.asarray(encoder.encode(texts[i : i + _BATCH]), dtype=np.float32) for i in range(0, len(texts), _BATCH)]
    )
    vectors = np.asarray(encoder.encode([queries[q] for q in qids]), dtype=np.float32)
    for qid, vector in zip(qids, vectors):
        top = np.argsort(-(matrix @ vector), kind="stable")[:DEPTH]
        semantic = [ids[j] for j in top.tolist()]
        out["raw_minilm"][qid] = semantic
        out["raw_rrf"][qid] = reciprocal_rank_fusion(out["raw_bm25"][qid], semantic)[:DEPTH]
    return out
