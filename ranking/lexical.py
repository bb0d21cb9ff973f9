"""The lexical channel: one Tantivy index for all scopes, BM25 with per-field weights.

Why one index: Tantivy keeps one writer (a lock) per index and a few files per segment;
one index per tenant would multiply both. Scope isolation is instead enforced at query
time: every query is ``scope == key AND (text clauses)``, and the text clauses are built
by this module from analyzed tokens (term queries), never by the query parser, so no
user string can name a field, use a wildcard or escape the scope clause.

Text fields are *stored* so that :meth:`LexicalIndex.purge` can rewrite the index without
the purged documents: tantivy-py exposes no explicit merge, and a deleted document's
terms and stored bytes survive in its segment until that segment is rewritten. A purge
therefore deletes every document, re-adds the live ones from the stored fields in the same
commit (Tantivy drops segments left with no live documents), and collects the old files.

Statistics (document frequencies, average field lengths) are index-wide, so a scope's
BM25 scores depend slightly on other scopes' term counts; no document of another scope can
ever be returned.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import tantivy

from ranking.documents import IndexDocument
from ranking.storage import atomic_write_json, read_json

TEXT_FIELDS = ("primary", "decision", "evidence", "context", "source_refs")
ANALYZER = "engram_en"
WRITER_HEAP_BYTES = 64_000_000


def _analyzer() -> tantivy.TextAnalyzer:
    """Tantivy's ``en_stem`` pipeline, built here so queries are analyzed identically."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("scope", stored=True, tokenizer_name="raw")
    builder.add_text_field("record_id", stored=True, tokenizer_name="raw")
    for name in TEXT_FIELDS:
        builder.add_text_field(name, stored=True, tokenizer_name=ANALYZER, index_option="freq")
    builder.add_integer_field("valid_time_ms", stored=True, fast=True)
    return builder.build()


@dataclass(frozen=True)
class LexicalHit:
    record_id: str
    score: float
    valid_time_ms: int


class LexicalIndex:
    """A Tantivy index under ``path`` plus a per-scope projection cursor file."""

    def __init__(self, path: Path) -> None:
        self._path = path
        path.mkdir(parents=True, exist_ok=True)
        self._schema = _schema()
        self._analyzer = _analyzer()
        self._index = tantivy.Index(self._schema, path=str(path), reuse=True)
        self._index.register_tokenizer(ANALYZER, self._analyzer)
        self._index.config_reader(reload_policy="Manual")
        self._writer: tantivy.IndexWriter | None = self._index.writer(WRITER_HEAP_BYTES, 1)
        self._write_lock = threading.Lock()
        self._cursor_file = path.parent / "lexical_cursors.json"
        self._cursors: dict[str, int] = read_json(self._cursor_file) or {}

    # -- projection -------------------------------------------------------------------

    def cursor(self, scope_key: str) -> int:
        return self._cursors.get(scope_key, 0)

    def apply(
        self,
        scope_key: str,
        upserts: Sequence[IndexDocument],
        removals: Sequence[str],
        through_cursor: int,
    ) -> None:
        """Delete-then-add each upsert, delete each removal, commit, then move the cursor."""
        with self._write_lock:
            writer = self._live_writer()
            try:
                for record_id in {*removals, *(d.record_id for d in upserts)}:
                    writer.delete_documents_by_query(self._record_query(scope_key, record_id))
                for doc in upserts:
                    writer.add_document(self._document(doc))
                writer.commit()
            except Exception:
                writer.rollback()
                raise
            self._index.reload()
            self._advance(scope_key, through_cursor)

    def purge(self, scope_key: str, record_ids: Sequence[str]) -> None:
        """Rewrite the index without ``record_ids`` so none of their bytes remain on disk."""
        purged = set(record_ids)
        with self._write_lock:
            writer = self._live_writer()
            self._index.reload()
            searcher = self._index.searcher()
            try:
                writer.delete_all_documents()
                if searcher.num_docs:
                    hits = searcher.search(tantivy.Query.all_query(), limit=searcher.num_docs, count=False).hits
                    for _, address in hits:
                        stored = searcher.doc(address)
                        if stored["scope"][0] == scope_key and stored["record_id"][0] in purged:
                            continue
                        writer.add_document(self._restore(stored))
                writer.commit()
            except Exception:
                writer.rollback()
                raise
            # Dropping the writer finishes merges and releases old segment files, which
            # garbage collection then deletes.
            writer.wait_merging_threads()
            self._writer = None
            writer = self._live_writer()
            writer.garbage_collect_files()
            self._index.reload()

    def reset(self) -> None:
        """Delete every document and every cursor (for a projection rebuild)."""
        with self._write_lock:
            writer = self._live_writer()
            writer.delete_all_documents()
            writer.commit()
            writer.garbage_collect_files()
            self._index.reload()
            self._cursors = {}
            atomic_write_json(self._cursor_file, self._cursors)

    def close(self) -> None:
        with self._write_lock:
            if self._writer is not None:
                self._writer.wait_merging_threads()
                self._writer = None

    # -- search -----------------------------------------------------------------------

    def tokens(self, text: str) -> list[str]:
        return self._analyzer.analyze(text)

    def search(
        self, scope_key: str, query: str, field_weights: Mapping[str, float], limit: int
    ) -> list[LexicalHit]:
        """BM25 hits of ``query`` inside ``scope_key`` only, best first (ties: record_id)."""
        counts = Counter(self.tokens(query))
        if not counts or limit <= 0:
            return []
        clauses = []
        for token, count in sorted(counts.items()):
            for name in TEXT_FIELDS:
                weight = float(field_weights.get(name, 0.0)) * count
                if weight > 0:
                    term = tantivy.Query.term_query(self._schema, name, token, index_option="freq")
                    clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(term, weight)))
        if not clauses:
            return []
        # The scope clause filters without scoring, so BM25 scores stay comparable.
        scope_filter = tantivy.Query.const_score_query(
            tantivy.Query.term_query(self._schema, "scope", scope_key), 0.0
        )
        scoped = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, scope_filter),
                (tantivy.Occur.Must, tantivy.Query.boolean_query(clauses)),
            ]
        )
        searcher = self._index.searcher()
        hits = searcher.search(scoped, limit=limit, count=False).hits
        if not hits:
            return []
        addresses = [address for _, address in hits]
        times = searcher.fast_field_values("valid_time_ms", addresses)
        out = [
            LexicalHit(searcher.doc(address)["record_id"][0], float(score), int(valid_time or 0))
            for (score, address), valid_time in zip(hits, times)
        ]
        out.sort(key=lambda h: (-h.score, h.record_id))
        return out

    # -- internals --------------------------------------------------------------------

    def _live_writer(self) -> tantivy.IndexWriter:
        if self._writer is None:
            self._writer = self._index.writer(WRITER_HEAP_BYTES, 1)
        return self._writer

    def _record_query(self, scope_key: str, record_id: str) -> tantivy.Query:
        return tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, tantivy.Query.term_query(self._schema, "scope", scope_key)),
                (tantivy.Occur.Must, tantivy.Query.term_query(self._schema, "record_id", record_id)),
            ]
        )

    @staticmethod
    def _document(doc: IndexDocument) -> tantivy.Document:
        out = tantivy.Document()
        out.add_text("scope", doc.scope_key)
        out.add_text("record_id", doc.record_id)
        for name in TEXT_FIELDS:
            out.add_text(name, getattr(doc, name))
        out.add_integer("valid_time_ms", int(doc.valid_time_ms))
        return out

    @staticmethod
    def _restore(stored: tantivy.Document) -> tantivy.Document:
        out = tantivy.Document()
        for name in ("scope", "record_id", *TEXT_FIELDS):
            for value in stored.get_all(name):
                out.add_text(name, value)
        for value in stored.get_all("valid_time_ms"):
            out.add_integer("valid_time_ms", value)
        return out

    def _advance(self, scope_key: str, through_cursor: int) -> None:
        if through_cursor > self._cursors.get(scope_key, 0):
            self._cursors = {**self._cursors, scope_key: through_cursor}
            atomic_write_json(self._cursor_file, self._cursors)


