"""Offline relevance runs: a BEIR collection through the service's own search path.

Why through the engine: the figures must describe what an agent gets from
``engram_memory_search`` (projection, ranking profile, fusion, recency blend, store
re-check, packet budget, paging), not what the raw engines could do in isolation.

Channels, and how each is obtained:

``hybrid``
    ``engine.execute("engram_memory_search")`` with ``minimum_channels:
    lexical_and_semantic``, paged (limit 50, max_packet_bytes 1 MiB) to depth 100.
``lexical``
    The same call with ``minimum_channels: lexical`` on an engine opened on the same data
    directory **without the model** (``Engine.open(load_model=False)``): the engine then
    picks its lexical profile, exactly as a deployment whose model is down or absent would.
    (With a healthy model, ``lexical`` still fuses semantic; that is the contract's floor.)
``naive_rrf`` (a baseline, run with ``hybrid``)
    Plain reciprocal rank fusion (k = 60, every candidate kept, no channel weighting) of
    the very channel lists the hybrid profile fuses, through ``Ranker.search`` with an
    evaluation profile (``NAIVE_RRF``): the naive fusion that hybrid must beat, measured
    on the service's own channels so that the two pair query by query in a significance
    test (the data READMEs' RRF anchor fuses the raw engines instead).
``raw_bm25``, ``raw_fts5`` (baselines, every run); ``raw_minilm``, ``raw_rrf`` (with ``raw_anchors``)
    The raw engines alone, as the data READMEs' anchors were measured, and SQLite FTS5
    ranking as a keyword-only peer does (:mod:`eval.raw_engines`), so hybrid pairs with
    them query by query too, and the lexical channel with the two keyword anchors.
``semantic``
    No semantic-only profile exists in the engine, so this is the ranker's public
    ``Ranker.search`` with an evaluation profile (``SEMANTIC_ONLY``): every lexical field
    weight 0 (the lexical channel returns nothing) and RRF fusion, so the order is the
    semantic channel's best-passage cosine order over the same HNSW index the hybrid path
    uses. It skips the engine's store re-check, which does not change the order of an
    all-current collection.

Where ``queries.jsonl`` gives each query a category (``metadata.category``), the report
adds ``categories``: per category, every run's nDCG@10 and recall@10 over its queries,
hybrid's paired test against the same runs as the whole collection's, and the lexical
channel's against the keyword anchors.

The collection is ingested into a dedicated scope (``eval`` / ``beir-<name>``) with
:func:`index_data.ingest.ingest_corpus`; a second run reuses it (idempotent: nothing is
embedded again), so the data directory is the embedding cache.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engram.index_data.ingest import ingest_corpus
from engram.index_data.readers import VectorSource, read_beir, with_context
from engram.index_data.records import DEFAULT_PURPOSE, RefusedRecord, record_id_for
from engram.models.scope import Scope
from engram.ranking import (
    HYBRID_PROFILE,
    ChannelHits,
    FieldWeights,
    FusionConfig,
    FusionMethod,
    Profile,
    SemanticConfig,
    ValidTimeConfig,
)
from engram.service.engine import CANDIDATE_CAP, CallContext, now_ms, scope_key

from .metrics import METRICS, NDCG10, by_category, evaluate, load_qrels, mean_metrics, paired_randomization
from .raw_engines import KEYWORD_RUNS, raw_runs
from .raw_engines import RUNS as RAW_RUNS
from .report import label

CHANNELS = ("lexical", "semantic", "hybrid")
#: Runs that are not channels of the service but what hybrid is judged against.
BASELINES = ("naive_rrf", *RAW_RUNS)
#: What each report tests hybrid against, query by query.
PAIRED = ("lexical", "semantic", "naive_rrf", "raw_rrf", "raw_fts5")
#: What each report tests the lexical channel against, query by query.
LEXICAL_PAIRED = KEYWORD_RUNS
DEPTH = 100
PAGE_LIMIT = 50
MAX_PACKET = 1_048_576
EVAL_TENANT = "eval"

SEMANTIC_ONLY = Profile(
    name="eval_semantic_only",
    version="4",
    config=replace(
        HYBRID_PROFILE.config,
        lexical=replace(HYBRID_PROFILE.config.lexical, field_weights=FieldWeights(0.0, 0.0, 0.0, 0.0, 0.0)),
        semantic=SemanticConfig(cap=DEPTH),
        valid_time=ValidTimeConfig(),  # the channel's own order: no valid-time window
        # the channel alone, unfloored: the floor is part of fusion, not of the channel
        fusion=FusionConfig(method=FusionMethod.RRF, semantic_only_min_similarity=None),
    ),
)


NAIVE_RRF = Profile(
    name="eval_naive_rrf",
    version="3",
    config=replace(
        HYBRID_PROFILE.config, fusion=FusionConfig(method=FusionMethod.RRF, semantic_only_min_similarity=None)
    ),
)


def load_queries(dataset_dir: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(Path(dataset_dir) / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                item = json.loads(line)
                out[str(item["_id"])] = str(item["text"])
    return out


def load_query_categories(dataset_dir: Path) -> dict[str, str]:
    """Each query's category, where ``queries.jsonl`` gives one (``metadata.category``, as
    BEIR carries query metadata; LoCoMo's are single-hop, multi-hop, temporal,
    open-domain and adversarial). Queries without one are left out; none gives ``{}``."""
    out: dict[str, str] = {}
    with open(Path(dataset_dir) / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                item = json.loads(line)
                category = (item.get("metadata") or {}).get("category")
                if category not in (None, ""):
                    out[str(item["_id"])] = str(category)
    return out


def eval_scope(name: str) -> Scope:
    return (EVAL_TENANT, f"beir-{name}")


def eval_context(scope: Scope, purpose: str = DEFAULT_PURPOSE) -> CallContext:
    return CallContext(
        tenant=scope[0],
        workspace=scope[1],
        principal="eval:runner",
        agent_id="engram-eval",
        session="eval_" + uuid.uuid4().hex[:12],
        purpose=purpose,
    )


def engine_search(
    engine: Any, ctx: CallContext, query: str, minimum_channels: str, depth: int = DEPTH
) -> tuple[list[str], dict[str, Any]]:
    """Record ids in rank order, to ``depth``, through ``engram_memory_search`` paging."""
    args: dict[str, Any] = {
        "query": query,
        "purpose_ref": ctx.purpose,
        "limit": PAGE_LIMIT,
        "max_packet_bytes": MAX_PACKET,
        "capability_policy": {"minimum_channels": minimum_channels, "network": "forbid"},
    }
    ids: list[str] = []
    receipt: dict[str, Any] = {}
    while len(ids) < depth:
        value = engine.execute("engram_memory_search", ctx, args)
        receipt = receipt or value["rank_receipt"]
        ids.extend(p["record"]["record_id"] for p in value["records"])
        cursor = value.get("next_page_cursor")
        if not cursor or not value["records"]:
            break
        args = {**args, "page_cursor": cursor}
    return ids[:depth], receipt


def _query_text(text: str) -> str:
    import unicodedata

    text = unicodedata.normalize("NFC", text).strip()
    return text.encode("utf-8")[:8192].decode("utf-8", "ignore") or "?"


def _latency(samples: Sequence[float]) -> dict[str, float]:
    if not samples:
        return {}
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] * 1000

    return {
        "total_s": round(sum(samples), 3),
        "mean_ms": round(statistics.fmean(samples) * 1000, 2),
        "p50_ms": round(pct(50), 2),
        "p95_ms": round(pct(95), 2),
    }


def _progress(enabled: bool):  # noqa: ANN202
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    bar.start()
    return bar


@dataclass(frozen=True)
class _Collection:
    """A collection as one run reads it: its documents, its judged queries, and the map
    from the record ids ingestion gives its documents back to their own ids."""

    name: str
    scope: Scope
    docs: list[Any]
    queries: dict[str, Any]
    qrels: dict[str, dict[str, int]]
    judged: list[str]
    rid_to_doc: dict[str, str]

    @property
    def key(self) -> str:
        return scope_key(self.scope)

    def texts(self) -> Iterator[tuple[str, str]]:
        """(query id, query text) of every judged query, in order."""
        for qid in self.judged:
            yield qid, _query_text(self.queries[qid])


@dataclass
class _Runs:
    """What the runs of one collection gather: each channel's ranked document ids per
    query, the profile each ran under, timings, and the hybrid's channel hits."""

    runs: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    receipts: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    hits: dict[str, Any] = field(default_factory=dict)

    def run_queries(
        self,
        collection: _Collection,
        channel: str,
        progress: bool,
        ask: Callable[[str, str], list[str]],
        after: Callable[[str, str], None] | None = None,
    ) -> None:
        """Ask every judged query through ``ask(qid, text)`` (record ids, best first),
        timing each, and keep the run under ``channel`` as document ids; ``after`` runs
        untimed after each query."""
        bar = _progress(progress)
        try:
            task = bar.add_task(f"{collection.name} {channel}", total=len(collection.judged)) if bar else None
            samples, run = [], {}
            for qid, text in collection.texts():
                t = time.perf_counter()
                ids = ask(qid, text)
                samples.append(time.perf_counter() - t)
                run[qid] = [collection.rid_to_doc.get(r, r) for r in ids]
                if after is not None:
                    after(qid, text)
                if bar:
                    bar.advance(task)
            self.runs[channel] = run
            self.timings[channel] = _latency(samples)
        finally:
            if bar:
                bar.stop()


def _load_collection(dataset_dir: Path, split: str, context_turns: int) -> _Collection:
    name = dataset_dir.name
    scope = eval_scope(name if context_turns <= 0 else f"{name}-ctx{context_turns}")
    docs = list(with_context(read_beir(dataset_dir, name), context_turns))
    queries = load_queries(dataset_dir)
    qrels = load_qrels(dataset_dir / "qrels" / f"{split}.tsv")
    rid_to_doc: dict[str, str] = {}
    for doc in docs:
        try:
            rid_to_doc[record_id_for(scope, doc)] = doc.external_id
        except RefusedRecord:
            pass
    judged = [q for q in queries if q in qrels]
    return _Collection(name, scope, docs, queries, qrels, judged, rid_to_doc)


def _model_runs(
    engine: Any, collection: _Collection, channels: Sequence[str], gathered: _Runs, *, progress: bool, save_hits: bool
) -> None:
    """The channels that need the model (semantic, hybrid) and, beside hybrid, the
    naive RRF of its two channels, through ``engine``."""
    ctx = eval_context(collection.scope)
    key = collection.key
    model_runs = [c for c in ("semantic", "hybrid") if c in channels]

    def keep_hits(qid: str, text: str) -> None:
        gathered.hits[qid] = _hits_json(engine.ranker.channel_hits(key, text, HYBRID_PROFILE), collection.rid_to_doc)

    for channel in model_runs + (["naive_rrf"] if "hybrid" in channels else []):
        ask: Callable[[str, str], list[str]]
        if channel == "hybrid":

            def ask_engine(qid: str, text: str, channel: str = channel) -> list[str]:
                ids, receipt = engine_search(engine, ctx, text, "lexical_and_semantic")
                gathered.receipts.setdefault(
                    channel, {"profile": receipt.get("profile"), "channels": receipt.get("channels")}
                )
                return ids

            ask = ask_engine
        else:
            profile = SEMANTIC_ONLY if channel == "semantic" else NAIVE_RRF
            # naive RRF sees the candidates a search gives fusion (CANDIDATE_CAP)
            cap = DEPTH if channel == "semantic" else CANDIDATE_CAP

            def ask_ranker(
                qid: str, text: str, channel: str = channel, profile: Profile = profile, cap: int = cap
            ) -> list[str]:
                ranked = engine.ranker.search(key, text, profile, valid_as_of_ms=now_ms(), candidate_cap=cap)
                gathered.receipts.setdefault(channel, {"profile": profile.name, "channels": list(ranked.channels)})
                return [c.record_id for c in ranked.candidates[:DEPTH]]

            ask = ask_ranker

        gathered.run_queries(
            collection, channel, progress, ask, keep_hits if save_hits and channel == "hybrid" else None
        )


def _lexical_run(data_dir: Path, collection: _Collection, gathered: _Runs, *, progress: bool) -> None:
    """The lexical channel: a model-less engine on the same directory, the engine's own
    lexical profile."""
    from engram.service.engine import Engine

    engine = Engine.open(data_dir, load_model=False)
    ctx = eval_context(collection.scope)

    def ask(_qid: str, text: str) -> list[str]:
        ids, receipt = engine_search(engine, ctx, text, "lexical")
        gathered.receipts.setdefault(
            "lexical", {"profile": receipt.get("profile"), "channels": receipt.get("channels")}
        )
        return ids

    try:
        gathered.run_queries(collection, "lexical", progress, ask)
    finally:
        engine.close()


def _reports(
    collection: _Collection, dataset_dir: Path, gathered: _Runs, *, split: str, context_turns: int, save_hits: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(report, details) from the gathered runs: the metrics per channel and baseline, the
    paired tests, the categories when the queries carry them."""
    judged, runs = collection.judged, gathered.runs
    qrels = {q: collection.qrels[q] for q in judged}
    per_query = {c: evaluate(qrels, runs[c]) for c in (*CHANNELS, *BASELINES) if c in runs}
    report_json = {
        "dataset": collection.name,
        "docs": len(collection.docs),
        "queries": len(judged),
        "channels": {c: mean_metrics(per_query[c]) for c in CHANNELS if c in per_query},
        "baselines": {c: mean_metrics(per_query[c]) for c in BASELINES if c in per_query},
        "significance": {
            f"{reference}_vs_{c}": paired_randomization(
                [per_query[reference][q][NDCG10] for q in judged], [per_query[c][q][NDCG10] for q in judged]
            )
            for reference, paired in (("hybrid", PAIRED), ("lexical", LEXICAL_PAIRED))
            for c in paired
            if reference in per_query and c in per_query
        },
        "split": split,
        "context_turns": context_turns,
        "timings": gathered.timings,
    }
    categories = load_query_categories(dataset_dir)
    sections = by_category(per_query, categories, paired=PAIRED)
    lexical_tests = by_category(per_query, categories, paired=LEXICAL_PAIRED, reference="lexical")
    for name, entry in sections.items():
        entry.setdefault("significance", {}).update(lexical_tests[name].get("significance", {}))
    if sections:  # only a collection whose queries carry categories reports them
        report_json["categories"] = sections
    details = {
        "dataset": collection.name,
        "scope": list(collection.scope),
        "profiles": gathered.receipts,
        "metrics": list(METRICS),
        "per_query": per_query,
        "runs": runs,
        "environment": {"cpu_count": os.cpu_count()},
    }
    if save_hits:
        details["hits"] = {"collection": label(report_json), "qrels": qrels, "queries": gathered.hits}
    return report_json, details


def run_relevance(
    dataset_dir: Path,
    data_dir: Path,
    *,
    channels: Sequence[str] = CHANNELS,
    encoder: Any = None,
    progress: bool = True,
    batch_size: int = 256,
    log: Callable[[str], None] | None = None,
    split: str = "test",
    context_turns: int = 0,
    vectors: Path | None = None,
    save_hits: bool = False,
    raw_anchors: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ingest (or reuse) the collection, run every judged query; (report, per_query).

    ``split``: which ``qrels/<split>.tsv`` judges the run. ``context_turns``: ingest with
    that many neighbouring conversation turns as context (:func:`with_context`), into a
    scope of its own. ``vectors``: passage vectors aligned with the ingested texts
    (``.npz``, as ``engram ingest --vectors`` reads), so the corpus is not embedded again.
    ``save_hits``: also keep each judged query's channel hits as the hybrid profile's
    fusion receives them (``details["hits"]``, written as hits.json.gz), the input of
    ``engram fusion-fit``. ``raw_anchors``: also run the raw model alone over the plain
    collection (:func:`eval.raw_engines.raw_runs`, which embeds every document once more,
    whole) and test hybrid against its RRF with raw BM25; the keyword anchors (raw BM25,
    FTS5) run on every call.
    """
    from engram.ranking import MiniLMEncoder
    from engram.service.engine import MODELS_DIR, Engine

    say = log or (lambda _m: None)
    dataset_dir = Path(dataset_dir)
    unknown = [c for c in channels if c not in CHANNELS]
    if unknown:
        raise ValueError(f"unknown channels: {unknown}")
    collection = _load_collection(dataset_dir, split, context_turns)
    name = collection.name
    gathered = _Runs()

    if raw_anchors and encoder is None:  # the raw runs embed with the engine's own model
        encoder = MiniLMEncoder(Path(data_dir) / MODELS_DIR)
    t0 = time.perf_counter()
    engine = Engine.open(data_dir, encoder=encoder) if encoder is not None else Engine.open(data_dir)
    gathered.timings["engine_open_s"] = round(time.perf_counter() - t0, 3)
    try:
        say(f"[{name}] ingesting {len(collection.docs)} documents into {collection.scope[0]}/{collection.scope[1]}")
        source = VectorSource.load(vectors) if vectors is not None else None
        report = ingest_corpus(
            engine,
            collection.scope,
            collection.docs,
            vectors=source,
            batch_size=batch_size,
            progress=progress,
            total=len(collection.docs),
        )
        gathered.timings["ingest"] = report.as_dict()
        if any(c in ("semantic", "hybrid") for c in channels):
            _model_runs(engine, collection, channels, gathered, progress=progress, save_hits=save_hits)
        say(f"[{name}] the raw engines alone (BM25, FTS5" + (", exact MiniLM, their RRF)" if raw_anchors else ")"))
        t = time.perf_counter()
        plain = [(doc.external_id, doc.text) for doc in read_beir(dataset_dir, name)]
        gathered.runs.update(raw_runs(plain, dict(collection.texts()), encoder if raw_anchors else None))
        gathered.timings["raw_engines_s"] = round(time.perf_counter() - t, 3)
    finally:
        engine.close()
    if "lexical" in channels:
        _lexical_run(data_dir, collection, gathered, progress=progress)
    return _reports(collection, dataset_dir, gathered, split=split, context_turns=context_turns, save_hits=save_hits)


def _hits_json(hits: ChannelHits, rid_to_doc: dict[str, str]) -> dict[str, Any]:
    """One query's channel lists with collection document ids: [id, score, valid_time_ms];
    and the window of valid time it names, [from_ms, to_ms] (or null)."""

    def doc(record_id: str) -> str:
        return rid_to_doc.get(record_id, record_id)

    return {
        "lexical": [[doc(h.record_id), h.score, h.valid_time_ms] for h in hits.lexical],
        "semantic": [[doc(h.record_id), h.similarity, h.valid_time_ms] for h in hits.semantic or ()],
        "similarity": {doc(r): v for r, v in hits.similarity.items()},
        "window": [hits.window.from_ms, hits.window.to_ms] if hits.window else None,
    }
