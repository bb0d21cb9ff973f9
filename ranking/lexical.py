"""The lexical channel: one Tantivy index per scope, BM25 with per-field weights.

Why per scope: BM25 statistics (document frequencies, average field lengths) are
index-wide, so in a shared index one scope's documents would change another scope's
scores, and a purge (which rewrites an index) would cost as much as the whole corpus.
With one index per scope, no call reads, ranks or counts another scope's data, and a
purge rewrites only the forgotten record's scope.

Files per scope (``root/<sha256(scope)[:32]>/``): ``index-v4/`` (the Tantivy index,
created on the scope's first upsert, never by a search) and ``cursor.json`` (the
projection cursor, written after the commit it covers and never moved backwards).
Indexes are opened lazily and kept in a bounded LRU (:data:`MAX_OPEN_INDEXES`); writers,
which hold a lock file and a few threads each, are kept for at most
:data:`MAX_OPEN_WRITERS` scopes. A writer is only ever closed under its scope's lock, and
an index leaves the cache only after its writer is closed, so two writers never race for
one scope's lock file.

Queries are built by this module from analyzed tokens (term queries), never by the query
parser, so no user string can name a field or use a wildcard. Every document still
carries its scope and every query still requires it (a zero-weight filter that leaves
BM25 scores unchanged), so a document could not be returned for another scope even if a
directory were mixed up.

Record ids are read back from four u64 fast columns (:mod:`ranking.record_words`)
rather than from each hit's stored document; an id not in the canonical form falls back
to the stored field.

Text fields are *stored* so that :meth:`LexicalIndex.purge` can rewrite a scope's index
without the purged documents: tantivy-py exposes no explicit merge, and a deleted
document's terms and stored bytes survive in its segment until that segment is rewritten.
A purge therefore copies the live documents from the stored fields into a fresh index
beside the current one (``index-v4.fresh``), without the scope's lock, so that the scope
keeps taking applies and answering searches; then, under the lock, it replays the
applies made meanwhile, renames the current index away (``index-v4.retired``) and the
fresh one into its place, and deletes the retired one. Opening the lexical root finishes
or undoes a swap a crash interrupted.

Fields (:data:`TEXT_FIELDS`, each weighed by the profile): the record's text by kind, its
citations' source references, and ``speaker``, the name a transcript line opens with
(:mod:`ranking.documents`), where every query term is looked up too, so that a question
naming a person can favour what that person said. Each field keeps its words' positions,
so that each pair of adjacent query words can also be looked up as a phrase
(:meth:`LexicalIndex.query_pairs`): a record holding the query's words together ranks
above one holding them far apart. In a question the function words weigh less than the
content words, and a record holding every content word gets a conjunctive clause as a
boost (:meth:`LexicalIndex.query_content`): it ranks above one holding a single word
many times.

Layout changes: earlier versions kept one shared index directly under the lexical root
and cursors in ``lexical_cursors.json`` beside it, later a per-scope ``index/`` with no
id columns, then ``index-v2/`` with no speaker field, then ``index-v3/`` with no word
positions. Such files are deleted on open
(they would otherwise keep bytes of records forgotten later); the scope's lexical cursor
then reads 0 and the projector rebuilds the scope from its journal on its next catch-up.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import tantivy

from engram.ranking import record_words
from engram.ranking.documents import IndexDocument
from engram.ranking.profiles import FieldWeights, LexicalConfig
from engram.ranking.query_time import WHEN_WORDS
from engram.ranking.storage import atomic_write_json, read_json, sync_directory

logger = logging.getLogger("engram.ranking")

TEXT_FIELDS = ("primary", "decision", "evidence", "context", "source_refs", "speaker")
ANALYZER = "engram_en"
WRITER_HEAP_BYTES = 64_000_000
MAX_OPEN_INDEXES = 64
MAX_OPEN_WRITERS = 8
LEGACY_CURSOR_FILE = "lexical_cursors.json"
INDEX_DIR = "index-v4"
#: Per-scope index directories of earlier layouts: ``index`` had no id columns,
#: ``index-v2`` no speaker field, ``index-v3`` no word positions.
LEGACY_INDEX_DIRS = ("index", "index-v2", "index-v3")
#: Beside a scope's index while a purge runs: the fresh copy it writes, then the index it
#: replaced (deleted once the copy is in place).
FRESH_DIR = f"{INDEX_DIR}.fresh"
RETIRED_DIR = f"{INDEX_DIR}.retired"
ID_COLUMNS = tuple(f"rid{i}" for i in range(record_words.WORDS))


def _analyzer(*, drop_stopwords: bool = False) -> tantivy.TextAnalyzer:
    """Tantivy's ``en_stem`` pipeline, built here so queries are analyzed identically.

    ``drop_stopwords`` gives the query-side variant: the same pipeline with English stop
    words removed before stemming (documents keep them, so it changes no indexed term).
    """
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
    )
    if drop_stopwords:
        builder = builder.filter(tantivy.Filter.stopword("english"))
    return builder.filter(tantivy.Filter.stemmer("english")).build()


@functools.lru_cache(maxsize=8)
def _content_analyzer(stopwords: tuple[str, ...]) -> tantivy.TextAnalyzer:
    """The document pipeline less ``stopwords`` (matched lowercased, before stemming)."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.custom_stopword(list(stopwords)))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("scope", stored=True, tokenizer_name="raw")
    builder.add_text_field("record_id", stored=True, tokenizer_name="raw")
    for name in TEXT_FIELDS:
        builder.add_text_field(name, stored=True, tokenizer_name=ANALYZER, index_option="position")
    builder.add_integer_field("valid_time_ms", stored=True, fast=True)
    for name in ID_COLUMNS:
        builder.add_unsigned_field(name, fast=True)
    return builder.build()


class _QueryWords(NamedTuple):
    """The words a query is ranked by, in its order, whether it reads as a description
    (long: content words, a repeat counts) or a question (every token once), and a
    question's distinct content words (:meth:`LexicalIndex.query_content`; none for a
    description)."""

    words: list[str]
    description: bool
    content: list[str]


class LexicalHit(NamedTuple):
    """One lexical candidate. A named tuple: a search builds up to 200 of them."""

    record_id: str
    score: float
    valid_time_ms: int


class _Scope:
    """One scope's open index, its writer (if any) and its cursor.

    ``lock`` guards ``writer``, ``cursor``, ``closed`` and index creation. ``closed`` is
    set (under ``lock``) when the entry leaves the cache; a caller that locked a closed
    entry must look the scope up again.
    """

    __slots__ = ("key", "directory", "index", "writer", "cursor", "closed", "lock", "changes")

    def __init__(self, key: str, directory: Path, index: tantivy.Index | None, cursor: int) -> None:
        self.key = key
        self.directory = directory
        self.index = index
        self.writer: tantivy.IndexWriter | None = None
        self.cursor = cursor
        self.closed = False
        self.lock = threading.Lock()
        # While a purge copies the index: each apply's (upserts, replaced record ids),
        # in order, for the purge to replay into its copy before swapping it in.
        self.changes: list[tuple[list[IndexDocument], list[str]]] | None = None


class LexicalIndex:
    """Per-scope Tantivy indexes and projection cursors under ``path``.

    Lock order: ``_scopes_lock`` before a scope's ``lock`` before ``_writers_lock``;
    the reverse direction only ever *tries* a scope lock (never blocks), so no cycle.
    """

    def __init__(self, path: Path, *, max_open: int = MAX_OPEN_INDEXES, max_writers: int = MAX_OPEN_WRITERS) -> None:
        self._root = path
        self._schema = _schema()
        self._analyzer = _analyzer()
        self._query_analyzer = _analyzer(drop_stopwords=True)
        self._when_tokens = sorted({t for word in WHEN_WORDS for t in self._analyzer.analyze(word)})
        self._max_open = max(1, max_open)
        self._max_writers = max(1, max_writers)
        self._entries: OrderedDict[str, _Scope] = OrderedDict()
        self._scopes_lock = threading.Lock()
        self._writers: OrderedDict[str, _Scope] = OrderedDict()
        self._writers_lock = threading.Lock()
        path.mkdir(parents=True, exist_ok=True)
        self._drop_legacy_layout()
        self._recover()

    # -- projection -------------------------------------------------------------------

    def cursor(self, scope_key: str) -> int:
        """The scope's applied cursor: in memory once the scope is open (every search
        and apply asks), else read from its file."""
        with self._scopes_lock:
            entry = self._entries.get(scope_key)
        if entry is not None:
            return entry.cursor
        return self._disk_cursor(scope_key)

    def held(self, scope_key: str) -> bool:
        """Whether the scope has a directory (index or cursor) here, or is open."""
        with self._scopes_lock:
            if scope_key in self._entries:
                return True
        return self._dir(scope_key).is_dir()

    def present(self, scope_key: str) -> bool:
        """Whether the scope has an index on disk (none until its first document)."""
        return (self._dir(scope_key) / INDEX_DIR / "meta.json").is_file()

    def _disk_cursor(self, scope_key: str) -> int:
        value = read_json(self._dir(scope_key) / "cursor.json")
        return int(value["cursor"]) if value else 0

    def apply(
        self,
        scope_key: str,
        *,
        upserts: Sequence[IndexDocument],
        removals: Sequence[str],
        through_cursor: int,
    ) -> None:
        """Delete-then-add each upsert, delete each removal, commit, then move the cursor."""
        if any(d.scope_key != scope_key for d in upserts):
            raise ValueError("every upserted document must belong to the applied scope")
        with self._locked(scope_key, create=True) as entry:
            assert entry is not None
            if upserts and entry.index is None:
                entry.index = self._open_index(entry.directory / INDEX_DIR, create=True)
            if entry.index is not None and (upserts or removals):
                writer = self._live_writer(entry)
                try:
                    replaced = sorted({*removals, *(d.record_id for d in upserts)})
                    if replaced:
                        writer.delete_documents_by_query(self._records_query(scope_key, replaced))
                    for doc in self._documents(upserts):
                        writer.add_document(doc)
                    writer.commit()
                except Exception:
                    writer.rollback()
                    raise
                entry.index.reload()
                if entry.changes is not None:
                    entry.changes.append((list(upserts), replaced))
            self._advance(entry, through_cursor)

    def purge(self, scope_key: str, record_ids: Sequence[str]) -> bool:
        """Rewrite the scope's index without ``record_ids`` so none of their bytes remain.

        The scope stays writable and searchable meanwhile: its live documents are copied
        from a searcher's snapshot into a fresh index beside the current one, without the
        scope's lock; only the end holds it, to replay the applies made in between, commit,
        and swap the fresh index in (see :meth:`_swap`). Returns False, having changed
        nothing, when the scope was closed meanwhile (evicted, dropped, reset): try again.
        """
        purged = set(record_ids)
        if not purged:
            return True
        with self._locked(scope_key, create=False) as entry:
            if entry is None or entry.index is None:
                return True
            entry.index.reload()
            searcher = entry.index.searcher()
            entry.changes = []  # what applies change from now on, replayed into the copy
        fresh_dir = entry.directory / FRESH_DIR
        shutil.rmtree(fresh_dir, ignore_errors=True)
        fresh = self._open_index(fresh_dir, create=True)
        assert fresh is not None
        writer = fresh.writer(WRITER_HEAP_BYTES, 1)
        try:
            if searcher.num_docs:
                hits = searcher.search(tantivy.Query.all_query(), limit=searcher.num_docs, count=False).hits
                for _, address in hits:
                    stored = searcher.doc(address)
                    if stored["scope"][0] != scope_key or stored["record_id"][0] in purged:
                        continue
                    writer.add_document(self._restore(stored))
            del searcher
            # The copy's segments are written and merged here, without the lock; what
            # the lock then covers is a commit of the applies made meanwhile.
            writer.commit()
            writer.wait_merging_threads()
            writer = fresh.writer(WRITER_HEAP_BYTES, 1)
            with entry.lock:
                changes, entry.changes = entry.changes, None
                if entry.closed or changes is None:
                    return False
                for upserts, replaced in changes:
                    if replaced:
                        writer.delete_documents_by_query(self._records_query(scope_key, replaced))
                    for doc in self._documents(upserts):
                        writer.add_document(doc)
                writer.commit()
                writer.wait_merging_threads()
                self._swap(entry, fresh_dir)
        except BaseException:
            with entry.lock:
                entry.changes = None
            raise
        finally:
            del writer
            shutil.rmtree(fresh_dir, ignore_errors=True)
            shutil.rmtree(entry.directory / RETIRED_DIR, ignore_errors=True)
        return True

    def _swap(self, entry: _Scope, fresh_dir: Path) -> None:
        """Put the committed index in ``fresh_dir`` in place of the entry's (caller holds
        ``entry.lock``). Two renames, then a sync of the scope's directory: a crash between
        them leaves no current index but a complete fresh one, which :meth:`_recover`
        puts in place on the next open."""
        self._close_writer(entry)
        current = entry.directory / INDEX_DIR
        os.rename(current, entry.directory / RETIRED_DIR)
        os.rename(fresh_dir, current)
        sync_directory(entry.directory)
        entry.index = self._open_index(current, create=False)

    def reset(self) -> None:
        """Delete every scope's index and cursor (for a projection rebuild)."""
        with self._scopes_lock:
            self._close_all()
            shutil.rmtree(self._root, ignore_errors=True)
            self._root.mkdir(parents=True, exist_ok=True)
            (self._root.parent / LEGACY_CURSOR_FILE).unlink(missing_ok=True)

    def drop(self, scope_key: str) -> None:
        """Delete one scope's index and cursor (the scope moved to other replicas)."""
        with self._scopes_lock:
            entry = self._entries.pop(scope_key, None)
            if entry is not None:
                with entry.lock:
                    entry.closed = True
                    self._close_writer(entry)
            shutil.rmtree(self._dir(scope_key), ignore_errors=True)

    def close(self) -> None:
        """Close every open writer and forget the open indexes (reopened on next use)."""
        with self._scopes_lock:
            self._close_all()

    # -- search -----------------------------------------------------------------------

    def open(self, scope_key: str) -> None:
        """Open the scope's index and a searcher now, if it has one on disk."""
        entry = self._lookup(scope_key, create=False)
        if entry is not None and entry.index is not None:
            entry.index.searcher()

    def tokens(self, text: str) -> list[str]:
        """``text`` analyzed as documents are (stemmed, stop words kept)."""
        return self._analyzer.analyze(text)

    def query_terms(self, query: str, config: LexicalConfig, *, asks_when: bool = False) -> dict[str, float]:
        """Each distinct query term (stemmed as documents are) and its weight.

        A short query (at most ``config.long_query_tokens`` tokens) is a question or a
        keyword list: every distinct term counts once, its content words at 1 and its
        function words (``config.question_stopwords``) at ``config.question_stopword_weight``
        (all at 1 when nothing else is left). In short records (conversation turns, notes)
        a function word still tells records apart, so it is weighed down, not dropped:
        dropping it lost on ADI and NPL, while at full weight "what", "did" and "the"
        together outweigh a rare content word. A longer query is a description: its stop words are noise
        that repetition would amplify, so they are dropped (unless nothing else is left),
        and a content word said n times weighs ``n ** long_query_count_power``, since a
        description repeats what it is about.

        ``asks_when`` (the question asks when, :mod:`ranking.query_time`): the words that
        date an event join the query at ``config.when_terms_weight``, a query's own words
        keeping their weight.
        """
        return self._terms(self._query_words(query, config), config, asks_when=asks_when)

    def query_pairs(self, query: str, config: LexicalConfig) -> list[tuple[str, str]]:
        """The adjacent pairs of the words a query is ranked by, in the query's order
        (every token of a short query, the content words of a long one, as
        :meth:`query_terms`), each distinct pair once, a word beside itself left out.
        Each is looked up as a phrase with ``config.pair_slop`` positions of play; none
        when ``config.pair_weight`` is 0."""
        return self._pairs(self._query_words(query, config), config)

    def _query_words(self, query: str, config: LexicalConfig) -> _QueryWords:
        """The words a query is ranked by, in order, analysed once for its terms and pairs:
        a long query's content words (stop words dropped), else (a short query, or a long
        one of nothing but stop words) all its tokens."""
        tokens = self.tokens(query)
        if len(tokens) > config.long_query_tokens and (content := self._query_analyzer.analyze(query)):
            return _QueryWords(content, description=True, content=[])
        question_content = _content_analyzer(config.question_stopwords).analyze(query)
        return _QueryWords(tokens, description=False, content=list(dict.fromkeys(question_content)))

    def query_content(self, query: str, config: LexicalConfig) -> list[str]:
        """A question's distinct content words, in order: its terms less
        ``config.question_stopwords`` (matched before stemming). In a question the other
        words weigh ``config.question_stopword_weight`` (unless nothing else is left), and
        a record holding every content word (at least two) gets the coordination clause
        (:meth:`_query_clauses`). None for a description, whose stop words are dropped."""
        return self._query_words(query, config).content

    def _terms(self, query: _QueryWords, config: LexicalConfig, *, asks_when: bool) -> dict[str, float]:
        if query.description:
            terms = {token: count**config.long_query_count_power for token, count in Counter(query.words).items()}
        else:
            terms = dict.fromkeys(query.words, 1.0)
            if query.content and config.question_stopword_weight != 1.0:
                content = set(query.content)
                terms = {t: 1.0 if t in content else config.question_stopword_weight for t in terms}
        if asks_when and config.when_terms_weight > 0:
            for token in self._when_tokens:
                terms.setdefault(token, config.when_terms_weight)
        return terms

    @staticmethod
    def _pairs(query: _QueryWords, config: LexicalConfig) -> list[tuple[str, str]]:
        if config.pair_weight <= 0:
            return []
        words = query.words
        return list(dict.fromkeys((a, b) for a, b in zip(words, words[1:]) if a != b))

    def search(
        self, scope_key: str, query: str, config: LexicalConfig, limit: int, *, asks_when: bool = False
    ) -> list[LexicalHit]:
        """BM25 hits of ``query`` inside ``scope_key`` only, best first (ties: record_id)."""
        if limit <= 0:
            return []
        words = self._query_words(query, config)
        clauses = self._query_clauses(words, config, asks_when=asks_when)
        if not clauses:
            return []
        entry = self._lookup(scope_key, create=False)
        index = entry.index if entry is not None else None
        if index is None:
            return []
        # The scope clause filters without scoring, so BM25 scores stay comparable; in a
        # per-scope index it matches every document unless a directory was mixed up.
        scope_filter = tantivy.Query.const_score_query(tantivy.Query.term_query(self._schema, "scope", scope_key), 0.0)
        scoped = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, scope_filter),
                (tantivy.Occur.Must, tantivy.Query.boolean_query(clauses)),
            ]
        )
        searcher = index.searcher()
        hits = searcher.search(scoped, limit=limit, count=False).hits
        if not hits:
            return []
        addresses = [address for _, address in hits]
        times = searcher.fast_field_values("valid_time_ms", addresses)
        out = [
            LexicalHit(record_id, float(score), int(valid_time or 0))
            for (score, _), valid_time, record_id in zip(hits, times, self._record_ids(searcher, addresses))
        ]
        out.sort(key=lambda h: (-h.score, h.record_id))
        return out

    def raw_probe(self, scope_key: str, config: LexicalConfig) -> Callable[[str, int], Any]:
        """Tantivy alone on this scope's index, for benchmarks: ``probe(query, k)`` runs the
        channel's scoring clauses (analysed the same way) at depth ``k``, without the scope
        filter, reading no record ids or stored fields."""
        entry = self._lookup(scope_key, create=False)
        if entry is None or entry.index is None:
            raise KeyError(scope_key)
        searcher = entry.index.searcher()

        def probe(query: str, k: int) -> Any:
            clauses = self._query_clauses(self._query_words(query, config), config, asks_when=False)
            return searcher.search(tantivy.Query.boolean_query(clauses), limit=k, count=False)

        return probe

    def raw_bulk_probe(self, directory: Path) -> Callable[[Sequence[IndexDocument]], None]:
        """Tantivy alone indexing in bulk, for benchmarks: a fresh index in ``directory``
        with this channel's schema, analyzer and writer, and ``add(documents)`` that adds
        each document as ``apply`` builds it and commits once, as ``apply`` commits a batch."""
        index = self._open_index(directory, create=True)
        assert index is not None
        writer = index.writer(WRITER_HEAP_BYTES, 1)

        def add(documents: Sequence[IndexDocument]) -> None:
            for doc in self._documents(documents):
                writer.add_document(doc)
            writer.commit()

        return add

    @staticmethod
    def _record_ids(searcher: tantivy.Searcher, addresses: list[tantivy.DocAddress]) -> list[str]:
        """Each hit's record id from the id columns, from the stored field where absent."""
        rows = list(zip(*(searcher.fast_field_values(name, addresses) for name in ID_COLUMNS)))
        decoded = iter(record_words.unpack_many([words for words in rows if None not in words]))
        return [
            next(decoded) if None not in words else searcher.doc(address)["record_id"][0]
            for address, words in zip(addresses, rows)
        ]

    def _query_clauses(
        self, words: _QueryWords, config: LexicalConfig, *, asks_when: bool
    ) -> list[tuple[tantivy.Occur, tantivy.Query]]:
        """One SHOULD clause per (term, weighted field), boosted by the field weight times
        the term's weight (:meth:`query_terms`), one per (pair, weighted field), a
        phrase boosted by the field weight times ``config.pair_weight``
        (:meth:`query_pairs`), and, for a question of two or more content words
        (:meth:`query_content`), the coordination clause: every content word in some
        weighted field, its BM25 boosted by ``config.coordination_weight``, so a record
        holding all of them ranks above one holding a few many times; alternatives
        measured: ``docs/results/relevance.md``."""
        weights = config.field_weights
        terms, pairs = self._terms(words, config, asks_when=asks_when), self._pairs(words, config)
        clauses = []
        for token, term_weight in sorted(terms.items()):
            for name in TEXT_FIELDS:
                weight = weights.get(name) * term_weight
                if weight > 0:
                    term = tantivy.Query.term_query(self._schema, name, token, index_option="freq")
                    clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(term, weight)))
        for pair in pairs:
            for name in TEXT_FIELDS:
                weight = weights.get(name) * config.pair_weight
                if weight > 0:
                    phrase = tantivy.Query.phrase_query(self._schema, name, list(pair), config.pair_slop)
                    clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(phrase, weight)))
        if config.coordination_weight > 0 and len(words.content) >= 2:
            every = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, self._any_field(token, weights)) for token in words.content]
            )
            clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(every, config.coordination_weight)))
        return clauses

    def _any_field(self, token: str, weights: FieldWeights) -> tantivy.Query:
        """``token`` in any weighted field, each field's BM25 boosted by its weight."""
        return tantivy.Query.boolean_query(
            [
                (
                    tantivy.Occur.Should,
                    tantivy.Query.boost_query(
                        tantivy.Query.term_query(self._schema, name, token, index_option="freq"), weights.get(name)
                    ),
                )
                for name in TEXT_FIELDS
                if weights.get(name) > 0
            ]
        )

    # -- scope cache ------------------------------------------------------------------

    def _dir(self, scope_key: str) -> Path:
        return self._root / hashlib.sha256(scope_key.encode()).hexdigest()[:32]

    def _open_index(self, directory: Path, *, create: bool) -> tantivy.Index | None:
        """The Tantivy index in ``directory``; None when absent and ``create`` is false."""
        if not create and not (directory / "meta.json").is_file():
            return None
        directory.mkdir(parents=True, exist_ok=True)
        index = tantivy.Index(self._schema, path=str(directory), reuse=True)
        # Custom analyzers are not persisted: register after every open.
        index.register_tokenizer(ANALYZER, _analyzer())
        index.config_reader(reload_policy="Manual")
        return index

    def _lookup(self, scope_key: str, *, create: bool) -> _Scope | None:
        """The cached entry for ``scope_key``, opening it if needed.

        With ``create`` false a scope with no index on disk gets no entry (None), so
        searching unknown scopes neither creates files nor fills the cache.
        """
        with self._scopes_lock:
            entry = self._entries.get(scope_key)
            if entry is not None:
                self._entries.move_to_end(scope_key)
                return entry
            directory = self._dir(scope_key)
            index = self._open_index(directory / INDEX_DIR, create=False)
            if index is None and not create:
                return None
            entry = _Scope(scope_key, directory, index, self._disk_cursor(scope_key))
            self._entries[scope_key] = entry
            self._evict_locked()
            return entry

    @contextmanager
    def _locked(self, scope_key: str, *, create: bool) -> Iterator[_Scope | None]:
        """The scope's entry with its lock held (retrying if it was evicted meanwhile)."""
        while True:
            entry = self._lookup(scope_key, create=create)
            if entry is None:
                yield None
                return
            with entry.lock:
                if entry.closed:
                    continue
                yield entry
                return

    def _evict_locked(self) -> None:
        """Drop least recently used entries beyond the cap (caller holds _scopes_lock).

        Busy entries (lock held) are skipped, so the cache may briefly exceed its cap
        rather than wait; the newest entry is never evicted.
        """
        excess = len(self._entries) - self._max_open
        for key in list(self._entries)[:-1]:
            if excess <= 0:
                break
            victim = self._entries[key]
            if not victim.lock.acquire(blocking=False):
                continue
            try:
                victim.closed = True
                self._close_writer(victim)
            finally:
                victim.lock.release()
            del self._entries[key]
            excess -= 1

    def _close_all(self) -> None:
        """Close every entry, waiting for in-flight work (caller holds _scopes_lock)."""
        for entry in list(self._entries.values()):
            with entry.lock:
                entry.closed = True
                self._close_writer(entry)
        self._entries.clear()

    def _live_writer(self, entry: _Scope) -> tantivy.IndexWriter:
        """The entry's writer, opened if needed (caller holds ``entry.lock``).

        Beyond MAX_OPEN_WRITERS, the least recently used idle writers are closed.
        """
        assert entry.index is not None
        if entry.writer is None:
            entry.writer = entry.index.writer(WRITER_HEAP_BYTES, 1)
            # A process killed inside a commit leaves files its meta.json never named,
            # such as a deletes file named by the opstamp the next commit reuses (which
            # then fails: FileAlreadyExists). Tantivy registers each file before writing
            # it, so collecting garbage before the first commit removes them.
            entry.writer.garbage_collect_files()
        victims: list[_Scope] = []
        with self._writers_lock:
            self._writers[entry.key] = entry
            self._writers.move_to_end(entry.key)
            excess = len(self._writers) - self._max_writers
            for key, other in list(self._writers.items()):
                if excess <= 0:
                    break
                if other is entry or not other.lock.acquire(blocking=False):
                    continue
                victims.append(other)
                del self._writers[key]
                excess -= 1
        for other in victims:
            try:
                self._close_writer(other)
            finally:
                other.lock.release()
        return entry.writer

    def _close_writer(self, entry: _Scope) -> None:
        """Finish merges and release the writer's lock file (caller holds ``entry.lock``)."""
        with self._writers_lock:
            if self._writers.get(entry.key) is entry:
                del self._writers[entry.key]
        writer, entry.writer = entry.writer, None
        if writer is not None:
            writer.wait_merging_threads()

    def _drop_legacy_layout(self) -> None:
        """Delete indexes of older layouts: the pre-per-scope shared index (its files sat
        directly under the root) and per-scope indexes without id columns, the speaker
        field or word positions, with their cursors, before any cursor is read."""
        if (self._root / "meta.json").is_file():
            for path in self._root.iterdir():
                if path.is_file():
                    path.unlink(missing_ok=True)
        (self._root.parent / LEGACY_CURSOR_FILE).unlink(missing_ok=True)
        dropped = 0
        for name in LEGACY_INDEX_DIRS:
            for legacy in self._root.glob(f"*/{name}"):
                shutil.rmtree(legacy)
                (legacy.parent / "cursor.json").unlink(missing_ok=True)
                dropped += 1
        if dropped:
            logger.warning(
                "lexical: %d scope index(es) of an older layout deleted; each is rebuilt from the journal "
                "when its scope is next caught up (a server does it during warm-up, before /readyz answers 200)",
                dropped,
            )

    def _recover(self) -> None:
        """Finish or undo purges a crash interrupted, before any scope opens: a fresh copy
        whose swap was cut between its two renames (no current index) is put in place;
        any other copy, and every index a swap retired, is deleted (they may hold bytes
        of the records being purged, whose purge is still owed and runs again)."""
        for fresh in self._root.glob(f"*/{FRESH_DIR}"):
            current = fresh.parent / INDEX_DIR
            if not (current / "meta.json").is_file() and (fresh.parent / RETIRED_DIR).is_dir():
                shutil.rmtree(current, ignore_errors=True)
                os.rename(fresh, current)
                sync_directory(fresh.parent)
            else:
                shutil.rmtree(fresh)
        for retired in self._root.glob(f"*/{RETIRED_DIR}"):
            shutil.rmtree(retired)

    # -- internals --------------------------------------------------------------------

    def _records_query(self, scope_key: str, record_ids: Sequence[str]) -> tantivy.Query:
        """The scope's documents of any of ``record_ids`` (one delete for a whole batch)."""
        return tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, tantivy.Query.term_query(self._schema, "scope", scope_key)),
                (tantivy.Occur.Must, tantivy.Query.term_set_query(self._schema, "record_id", list(record_ids))),
            ]
        )

    @staticmethod
    def _documents(docs: Sequence[IndexDocument]) -> Iterator[tantivy.Document]:
        """Each document as the index stores it, the id columns of all packed at once."""
        for doc, words in zip(docs, record_words.pack_many([d.record_id for d in docs])):
            out = tantivy.Document()
            out.add_text("scope", doc.scope_key)
            out.add_text("record_id", doc.record_id)
            for name in TEXT_FIELDS:
                out.add_text(name, getattr(doc, name))
            out.add_integer("valid_time_ms", int(doc.valid_time_ms))
            LexicalIndex._add_id_columns(out, words)
            yield out

    @staticmethod
    def _restore(stored: tantivy.Document) -> tantivy.Document:
        out = tantivy.Document()
        for name in ("scope", "record_id", *TEXT_FIELDS):
            for value in stored.get_all(name):
                out.add_text(name, value)
        for value in stored.get_all("valid_time_ms"):
            out.add_integer("valid_time_ms", value)
        LexicalIndex._add_id_columns(out, record_words.pack(stored["record_id"][0]))
        return out

    @staticmethod
    def _add_id_columns(out: tantivy.Document, words: tuple[int, ...] | None) -> None:
        for name, word in zip(ID_COLUMNS, words or ()):
            out.add_unsigned(name, word)

    def _advance(self, entry: _Scope, through_cursor: int) -> None:
        """Move the scope's cursor forward only (caller holds ``entry.lock``)."""
        if through_cursor > entry.cursor:
            atomic_write_json(entry.directory / "cursor.json", {"cursor": through_cursor})
            entry.cursor = through_cursor
