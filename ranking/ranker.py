"""The ranker: both channels behind one projection-and-search interface for the engine.

Both indexes are projections of the engine's journal: ``apply`` moves them forward and
records how far (a cursor per scope and channel, written only after the index change is
durable, so a crash in between re-applies a batch, which is idempotent). The lexical
channel commits every apply; the semantic channel applies in memory and saves at
checkpoints (see :mod:`ranking.semantic`): after a crash its cursor reads as of the last
checkpoint and the projector re-applies from there. :meth:`Ranker.checkpoint` saves now,
:meth:`Ranker.close` and :meth:`Ranker.purge` always do. ``purge``
removes the bytes of records the journal has already removed. ``search`` returns every
candidate of the channels the profile needs, fused and explained; it never decides what
may be disclosed, the engine re-checks each candidate.

A semantic failure (no encoder, model error, damaged vector file) never blocks the
lexical channel: apply still projects lexically and leaves the semantic cursor behind,
``semantic_health`` says why, and a profile that needs semantic raises
:class:`SemanticUnavailable`. How far behind the semantic cursor may be is the engine's
decision (its lag bound), not a health reason: during every apply the lexical cursor
leads while the batch is still being embedded.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np

from engram.ranking.batching import NaturalBatcher
from engram.ranking.documents import WINDOWING, IndexDocument, passages
from engram.ranking.encoder import SMALL_BATCH, Encoder, encode_queries, encoder_id
from engram.ranking.fusion import Contribution, fuse, record_ids
from engram.ranking.lexical import LexicalHit, LexicalIndex
from engram.ranking.probes import RawBulkIndexing, RawEngines
from engram.ranking.profiles import LEXICAL, SEMANTIC, LexicalConfig, Profile, QueryPrecision, SemanticConfig
from engram.ranking.query_time import NO_TIME, QueryTime, ValidTimeWindow, read_query_time
from engram.ranking.query_time import warm as warm_date_parser
from engram.ranking.semantic import (
    CHECKPOINT_RECORDS,
    CHECKPOINT_SECONDS,
    CHECKPOINT_SPACING,
    CorruptIndex,
    GraphThreads,
    SemanticHit,
    SemanticIndex,
    SemanticUnavailable,
)

#: The search stage after the two channels, as the latency observer names it.
FUSION = "fusion"

EMBED_BATCH = 256

#: Threads that run hybrid searches' lexical channels beside their query encodes. A
#: lexical search takes a few ms against the encoder's ten or more, so a few threads
#: keep up with many concurrent searches; one that finds them all busy waits its turn.
LEXICAL_THREADS = 4


@dataclass(frozen=True)
class RankedList:
    """The outcome of one search: the profile, the channels that ran and the order."""

    profile: Profile
    channels: tuple[str, ...]
    candidates: Sequence[Contribution]
    candidate_ids: list[str]
    #: What the profile read of time in the query (a when-question, a valid-time window).
    query_time: QueryTime = NO_TIME

    @property
    def ordered_ids(self) -> Sequence[str]:
        """The candidates' record ids in rank order, without making their contributions."""
        return record_ids(self.candidates)


@dataclass(frozen=True)
class VectorSpace:
    """What this ranker's passage vectors are: the model that computes them (None: an
    unnamed encoder, or none), the passage windowing and the dimension. Vectors made
    elsewhere stand in for this ranker's own only from an equal space."""

    encoder: str | None
    windowing: str
    dim: int


class Applied(NamedTuple):
    """What one ``apply`` did in the semantic channel: documents whose vectors were
    supplied, and documents the encoder embedded (both 0 when the channel skipped it)."""

    supplied: int
    embedded: int


class ChannelHits(NamedTuple):
    """One query's channel lists as fusion receives them (``semantic`` None: lexical-only),
    and the window of valid time the query names (None: none, or not read)."""

    lexical: list[LexicalHit]
    semantic: list[SemanticHit] | None
    similarity: dict[str, float]
    window: ValidTimeWindow | None = None


class Ranker:
    """Lexical (Tantivy) and semantic (usearch HNSW) projections under ``root``."""

    def __init__(
        self,
        root: Path,
        encoder: Encoder | None,
        *,
        dim: int | None = None,
        checkpoint_records: int = CHECKPOINT_RECORDS,
        checkpoint_seconds: float = CHECKPOINT_SECONDS,
        checkpoint_spacing: float = CHECKPOINT_SPACING,
    ) -> None:
        self._root = Path(root)
        self._encoder = encoder
        self._dim = dim or (encoder.dim if encoder is not None else 384)
        # Tantivy writes its files (stored record text among them) with the process
        # umask; a private root keeps every one of them out of other users' reach.
        self._root.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self._root, 0o700)
        self._lexical = LexicalIndex(self._root / "lexical")
        self._semantic = SemanticIndex(
            self._root / "semantic",
            self._dim,
            checkpoint_records=checkpoint_records,
            checkpoint_seconds=checkpoint_seconds,
            checkpoint_spacing=checkpoint_spacing,
        )
        self._encoder_error: str | None = None
        # Concurrent searches encode their queries together (see ranking.batching), in
        # batches no larger than what the encoder serves through ONNX Runtime; one
        # batcher per query precision, as a batch runs through one graph.
        self._queries: dict[QueryPrecision, NaturalBatcher[str, np.ndarray]] = {
            precision: NaturalBatcher(self._query_encode(precision), max_batch=SMALL_BATCH)
            for precision in QueryPrecision
        }
        # A hybrid search's lexical channel runs here while its caller encodes the query.
        self._lexical_pool = ThreadPoolExecutor(LEXICAL_THREADS, thread_name_prefix="engram-lexical")
        # An apply's lexical channel runs here beside its semantic channel.
        self._apply_pool = ThreadPoolExecutor(1, thread_name_prefix="engram-apply")
        self._lifecycle = threading.Lock()
        self._purges: dict[str, threading.Lock] = {}  # one per scope: its purges take turns
        #: Called with (stage, seconds) after each search stage: lexical, semantic
        #: (query encoding included), fusion. Set by the engine's owner (metrics).
        self.observe_latency: Callable[[str, float], None] | None = None

    # -- projection -------------------------------------------------------------------

    @property
    def vector_space(self) -> VectorSpace:
        return VectorSpace(encoder_id(self._encoder), WINDOWING, self._dim)

    def projection_cursor(self, scope_key: str) -> dict[str, int]:
        return {LEXICAL: self._lexical.cursor(scope_key), SEMANTIC: self._semantic.cursor(scope_key)}

    def apply(
        self,
        scope_key: str,
        *,
        upserts: Sequence[IndexDocument],
        removals: Sequence[str],
        through_cursor: int,
        vectors: Sequence[np.ndarray | None] | None = None,
        after_cursor: int | None = None,
        graph_threads: GraphThreads = 0,
    ) -> Applied:
        """Project one journal batch into both channels (idempotent, cursors never go back).

        ``vectors``: precomputed passage vectors, one array per upsert with one row per
        :func:`ranking.documents.passages` window of its semantic text (bulk ingestion,
        a seeded warm-up); an upsert whose entry is None is embedded here.
        ``after_cursor``: the cursor this batch continues from; a channel that is behind
        it skips the batch rather than record a gap as applied, and a channel already at
        or past ``through_cursor`` skips it as done. ``graph_threads``: the threads the
        vectors are added to the graph with (0: one per core; a bulk load that writes in
        another process leaves that process its core), or a function asked before each
        slice of them.
        """
        if any(d.scope_key != scope_key for d in upserts):
            raise ValueError("every upserted document must belong to the applied scope")
        if vectors is not None and len(vectors) != len(upserts):
            raise ValueError("vectors must hold one array per upserted document")
        cursors = self.projection_cursor(scope_key)

        def due(channel: str) -> bool:
            """Not yet through this batch, and not behind where it starts (a gap)."""
            at = cursors[channel]
            return at < through_cursor and (after_cursor is None or at >= after_cursor)

        given: list[np.ndarray | None] = list(vectors) if vectors is not None else [None] * len(upserts)
        missing = [i for i, v in enumerate(given) if v is None]
        lexical: Future[None] | None = None
        if due(LEXICAL):
            if not missing and due(SEMANTIC):
                # Nothing to embed: Tantivy indexes on the apply thread while this one adds
                # the vectors to the graph (both release the GIL). A batch to embed is
                # indexed lexically first, so lexical search covers it during the embedding.
                lexical = self._apply_pool.submit(
                    self._lexical.apply, scope_key, upserts=upserts, removals=removals, through_cursor=through_cursor
                )
            else:
                self._lexical.apply(scope_key, upserts=upserts, removals=removals, through_cursor=through_cursor)
        if not due(SEMANTIC):
            return Applied(0, 0)
        try:
            try:
                computed = self.embed([upserts[i] for i in missing]) if missing else []
            except SemanticUnavailable:
                return Applied(0, 0)
            for i, v in zip(missing, computed):
                given[i] = v
            self._semantic.apply(
                scope_key,
                upserts=[(d.record_id, d.valid_time_ms, v) for d, v in zip(upserts, given) if v is not None],
                removals=removals,
                through_cursor=through_cursor,
                graph_threads=graph_threads,
            )
        finally:
            if lexical is not None:
                lexical.result()  # its failure is the apply's, as when it ran first
        return Applied(len(upserts) - len(missing), len(missing))

    def purge(self, scope_key: str, record_ids: Sequence[str]) -> bool:
        """Physically remove already-removed records from both channels' files (a scope
        this process keeps nothing of has nothing to purge, and gets no files). Each
        channel rewrites its files beside the scope's searches and applies, and swaps
        the rewrite in; one purge of a scope runs at a time. False: not done (a fault,
        or the scope closed meanwhile), to be tried again."""
        if not record_ids or not self.holds(scope_key):
            return True
        with self._purge_lock(scope_key):
            try:
                return self._lexical.purge(scope_key, record_ids) and self._semantic.purge(scope_key, record_ids)
            except (CorruptIndex, OSError, RuntimeError, ValueError):
                return False

    def _purge_lock(self, scope_key: str) -> threading.Lock:
        with self._lifecycle:
            return self._purges.setdefault(scope_key, threading.Lock())

    def reset(self) -> None:
        """Drop every index file and cursor (before a rebuild from the journal)."""
        with self._lifecycle:
            self._lexical.reset()
            self._semantic.reset()

    def drop(self, scope_key: str) -> None:
        """Delete one scope's indexes, files and cursors from both channels (its
        projection now lives on other replicas); projecting it again starts over."""
        with self._lifecycle:
            self._lexical.drop(scope_key)
            self._semantic.drop(scope_key)

    def holds(self, scope_key: str) -> bool:
        """Whether either channel keeps anything of the scope here (every apply leaves
        the lexical channel's directory, so a projected scope always counts)."""
        return self._lexical.held(scope_key) or self._semantic.held(scope_key)

    def index_bytes(self, scope_key: str) -> dict[str, int]:
        """Bytes each channel's files of the scope take on disk (0 for none here)."""
        return {
            LEXICAL: _bytes_under(self._lexical._dir(scope_key)),
            SEMANTIC: _bytes_under(self._semantic._dir(scope_key)),
        }

    def checkpoint(self, scope_key: str | None = None) -> None:
        """Make every applied change durable now (all scopes, or just ``scope_key``)."""
        self._semantic.checkpoint(scope_key)

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until the checkpoints that applies made due (taken in the background) are
        saved; False if ``timeout`` seconds ran out first."""
        return self._semantic.settle(timeout)

    def close(self) -> None:
        """Checkpoint the semantic channel and close the lexical writers."""
        with self._lifecycle:
            self._lexical_pool.shutdown(wait=True)
            self._apply_pool.shutdown(wait=True)
            try:
                self._semantic.close()
            finally:
                self._lexical.close()

    def embed(self, upserts: Sequence[IndexDocument]) -> list[np.ndarray]:
        """Passage vectors for each document (one row per :func:`passages` window),
        embedded in large batches: what ``apply`` computes when not given ``vectors``, so a
        caller can embed ahead of ``apply`` (bulk ingestion overlaps it with writing).
        Raises :class:`SemanticUnavailable` without a working encoder."""
        windows = [passages(d.semantic_text()) for d in upserts]
        flat = [w for ws in windows for w in ws]
        rows = [self._encode(flat[i : i + EMBED_BATCH]) for i in range(0, len(flat), EMBED_BATCH)]
        matrix = np.vstack(rows) if rows else np.zeros((0, self._dim), dtype=np.float32)
        out: list[np.ndarray] = []
        start = 0
        for ws in windows:
            out.append(matrix[start : start + len(ws)])
            start += len(ws)
        return out

    # -- search -----------------------------------------------------------------------

    def search(
        self,
        scope_key: str,
        query: str,
        profile: Profile,
        *,
        valid_as_of_ms: int,
        candidate_cap: int = 1000,
        fallback: Profile | None = None,
    ) -> RankedList:
        """Fused candidates of ``profile``'s channels. When the semantic channel fails
        (:class:`SemanticUnavailable`) and a lexical ``fallback`` profile is given, the
        answer is ranked by it from the lexical hits already in hand, without searching
        the lexical index again; without one the failure is raised."""
        config = profile.config
        started = time.perf_counter()
        when = self.query_time(query, profile)
        lexical_cap = min(candidate_cap, config.lexical.cap)
        lexical_job = self._lexical_job(
            scope_key, query, config.lexical, lexical_cap, beside=config.semantic, asks_when=when.asks_when
        )
        semantic = None
        similarity: dict[str, float] = {}
        if config.semantic is not None:
            try:
                semantic, similarity = self._semantic_candidates(
                    scope_key, query, lexical_job, config.semantic, candidate_cap
                )
            except SemanticUnavailable:
                if fallback is None or fallback.needs_semantic:
                    raise
                asked, profile, config = config, fallback, fallback.config
                fallback_cap = min(candidate_cap, config.lexical.cap)
                asked_when = when
                when = self.query_time(query, profile)
                if fallback_cap != lexical_cap or config.lexical != asked.lexical or when != asked_when:
                    lexical_job = self._lexical_job(
                        scope_key, query, config.lexical, fallback_cap, beside=None, asks_when=when.asks_when
                    )
        channels_done = time.perf_counter()
        lexical, lexical_seconds = lexical_job.result()
        candidates = fuse(lexical, semantic, similarity, config, valid_as_of_ms, when.window)
        observe = self.observe_latency
        if observe is not None:
            observe(LEXICAL, lexical_seconds)
            if semantic is not None:
                observe(SEMANTIC, channels_done - started)
            observe(FUSION, time.perf_counter() - channels_done)
        return RankedList(
            profile=profile,
            channels=profile.channels,
            candidates=candidates,
            candidate_ids=sorted(record_ids(candidates)),
            query_time=when,
        )

    @staticmethod
    def query_time(query: str, profile: Profile) -> QueryTime:
        """The time signals ``profile`` uses, read from ``query`` (none parsed otherwise)."""
        config = profile.config
        if not config.reads_query_time:
            return NO_TIME
        return read_query_time(
            query, when=config.lexical.when_terms_weight > 0, window=config.valid_time.window_boost > 0
        )

    def channel_hits(self, scope_key: str, query: str, profile: Profile, *, candidate_cap: int = 1000) -> ChannelHits:
        """What ``search`` hands to fusion for ``profile``, before fusing: the lexical hits,
        the semantic hits and the exact cosines of lexical-only hits (fitting fusion
        offline). Raises :class:`SemanticUnavailable` when the profile needs a semantic
        channel that cannot serve."""
        config = profile.config
        when = self.query_time(query, profile)
        lexical_cap = min(candidate_cap, config.lexical.cap)
        lexical_job = self._lexical_job(
            scope_key, query, config.lexical, lexical_cap, beside=config.semantic, asks_when=when.asks_when
        )
        if config.semantic is None:
            return ChannelHits(lexical_job.result()[0], None, {}, when.window)
        semantic, similarity = self._semantic_candidates(scope_key, query, lexical_job, config.semantic, candidate_cap)
        return ChannelHits(lexical_job.result()[0], semantic, similarity, when.window)

    def passage_vectors(self, scope_key: str, record_ids: Sequence[str]) -> list[np.ndarray | None]:
        """Each record's indexed passage vectors (None where the semantic channel does not
        hold the record): what an export hands to a later ingest as precomputed vectors."""
        return [self._semantic.passage_vectors(scope_key, rid) for rid in record_ids]

    def raw_engines(self, scope_key: str, profile: Profile) -> RawEngines:
        """The scope's engines alone, asked what ``profile`` asks of them (benchmarks)."""
        weights = profile.config.lexical
        lexical, semantic = self._lexical, self._semantic
        return RawEngines(
            tantivy=lexical.raw_probe(scope_key, weights),
            lexical_channel=lambda query, k: lexical.search(scope_key, query, weights, k),
            knn=lambda queries, k, ef: semantic.raw_knn(scope_key, queries, k, ef),
            label_record=lambda label: semantic.label_record(scope_key, label),
        )

    def raw_bulk_indexing(self, directory: Path) -> RawBulkIndexing:
        """Fresh indexes (Tantivy's in ``directory``, usearch's in memory) with each
        channel's schema, writer and graph, fed by the engines alone (benchmarks)."""
        return RawBulkIndexing(
            tantivy=self._lexical.raw_bulk_probe(Path(directory)), usearch=self._semantic.raw_bulk_probe(self._dim)
        )

    def lexical_present(self, scope_key: str) -> bool:
        """Whether the lexical channel has an index for ``scope_key`` on disk."""
        return self._lexical.present(scope_key)

    def _lexical_job(
        self,
        scope_key: str,
        query: str,
        config: LexicalConfig,
        limit: int,
        *,
        beside: SemanticConfig | None,
        asks_when: bool = False,
    ) -> Future[tuple[list[LexicalHit], float]]:
        """The lexical channel's hits and the seconds they took. Beside a semantic channel
        the lexical search runs on the ranker's own thread while the caller encodes the
        query (both release the GIL), so a hybrid search waits for the longer of the two
        rather than their sum; alone it runs here, with no thread hand-off."""
        if beside is not None:
            return self._lexical_pool.submit(self._timed_lexical, scope_key, query, config, limit, asks_when)
        job: Future[tuple[list[LexicalHit], float]] = Future()
        job.set_result(self._timed_lexical(scope_key, query, config, limit, asks_when))
        return job

    def _timed_lexical(
        self, scope_key: str, query: str, config: LexicalConfig, limit: int, asks_when: bool = False
    ) -> tuple[list[LexicalHit], float]:
        started = time.perf_counter()
        hits = self._lexical.search(scope_key, query, config, limit, asks_when=asks_when)
        return hits, time.perf_counter() - started

    def _semantic_candidates(
        self,
        scope_key: str,
        query: str,
        lexical_job: Future[tuple[list[LexicalHit], float]],
        config: SemanticConfig,
        candidate_cap: int,
    ) -> tuple[list[SemanticHit], dict[str, float]]:
        """The semantic channel's hits, and exact similarities of lexical-only hits (so
        both channels judge the same candidates): the query is encoded and the graph
        searched while ``lexical_job`` runs; only the exact similarities wait for it."""
        vector = self._queries[config.query_precision].submit(query)
        try:
            semantic = self._semantic.search(scope_key, vector, min(candidate_cap, config.cap))
            lexical, _ = lexical_job.result()
            similarity = self._semantic.similarities(
                scope_key, vector, sorted({h.record_id for h in lexical} - {h.record_id for h in semantic})
            )
        except CorruptIndex as exc:
            raise SemanticUnavailable(f"index corrupt: {exc}") from exc
        return semantic, similarity

    @staticmethod
    def warm_query_time() -> None:
        """Load the date parser that reads time in queries now (about a second) rather
        than in the first search whose query names a year."""
        warm_date_parser()

    def warm(self, scope_key: str) -> None:
        """Open the scope's index readers now (the vector file is read and checked, the
        Tantivy index opened), so its first search does not pay for it. A damaged vector
        file is left for :meth:`semantic_health` to report."""
        self._lexical.open(scope_key)
        try:
            self._semantic.check(scope_key)
        except CorruptIndex:
            pass

    def semantic_health(self, scope_key: str | None = None) -> str | None:
        """None when the semantic channel can serve ``scope_key``, else a short reason."""
        if self._encoder is None:
            return "model not loaded"
        if self._encoder_error is not None:
            return f"model failed: {self._encoder_error}"
        if scope_key is not None:
            try:
                self._semantic.check(scope_key)
            except CorruptIndex as exc:
                return f"index corrupt: {exc}"
        return None

    # -- internals --------------------------------------------------------------------

    def _query_encode(self, precision: QueryPrecision) -> Callable[[Sequence[str]], Sequence[np.ndarray]]:
        # Rows of one array are the sequence of vectors the batcher hands out.
        return lambda texts: cast(Sequence[np.ndarray], self._encode(texts, precision))

    def _encode(self, texts: Sequence[str], query_precision: QueryPrecision | None = None) -> np.ndarray:
        """Passages (``query_precision`` None) or queries at that precision, as rows."""
        if self._encoder is None:
            raise SemanticUnavailable("model not loaded")
        try:
            if query_precision is None:
                vectors = self._encoder.encode(texts)
            else:
                vectors = encode_queries(self._encoder, texts, query_precision)
        except Exception as exc:  # the model is a foreign library: any failure means "down"
            self._encoder_error = type(exc).__name__
            raise SemanticUnavailable(f"model failed: {type(exc).__name__}") from exc
        self._encoder_error = None
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self._dim)


def _bytes_under(directory: Path) -> int:
    """The sizes of the regular files under ``directory`` (0 when it is absent)."""
    if not directory.is_dir():
        return 0
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())
