"""Capacity benchmark: ingest rate, search latency, raw-engine costs, memory, disk, recall.

For each size a synthetic corpus (:mod:`eval.corpus_gen`: Zipfian text, low-rank
vectors) is generated streaming into an ``.npy`` and ingested with precomputed vectors
through :func:`index_data.ingest.ingest_corpus` (the real operator path: digests, sealing,
journal, both indexes), and the raw engines alone index the same batches on fresh
indexes (Tantivy adds each batch's documents and commits once, usearch adds its vectors in
one call; skipped with ``raw_bulk=False``): the ingest rate over theirs, and the CPU
seconds of both. Then, in the same process:

* search latency (p50/p95/p99) through ``engine.execute("engram_memory_search")``:
  hybrid (``lexical_and_semantic``, includes encoding the query with the real model) on
  the engine with the model, lexical on the same directory reopened without the model
  (the engine's lexical profile);
* the raw engines alone on the same indexes and queries, asked for what the engine
  asks of them: the encoder on one query (at the profile's query precision), Tantivy's
  search for the lexical channel's query at the profile's candidate depth (analysis
  included, no stored-field reads) and the HNSW index's (usearch) ``search`` at the
  semantic depth and the profile's search expansion (plus k=10 for reference); and the
  ratios engine / sum of raw parts;
* HNSW recall@10 against exact numpy brute force over all vectors, at several ``ef``
  (16 to 4096, and the ef the profile gives an index of that size), and, at sizes up to
  ``hnswlib_up_to``, the same for hnswlib (the engine before usearch) built over the
  same vectors with the same graph parameters, with its build time and bytes;
* the bench process's own RSS (current and peak during ingest: it also holds the model,
  earlier sizes' leftovers and the precomputed-vector file's pages) and disk per
  component; then the service's own memory: ``engram serve`` started alone on the
  size's directory, resident memory after ``/readyz`` and after a fixed number of
  searches, and its peak (:mod:`eval.service_memory`);
* once, the encoder-bound ingest rate (no precomputed vectors, real model) on a small
  sample of real text against the encoder alone on the same passages, and, on the first
  size, MCP over HTTP on loopback against ``service.http.app.create_app``: one client's
  sequential searches (latency against the raw engines), then a load run of concurrent
  MCP SDK clients (search + capture + admission), checking that every admitted record is
  readable afterwards.

``--reuse`` keeps a size's generated corpus and ingested engine (with its ingest
figures in ``ingest.json``) and measures again on it, so latency can be re-measured
after a change without a long ingest.

The raw engines are reached through ``Ranker.raw_engines`` (:mod:`ranking.probes`). The
load run is :mod:`eval.load`, the report :mod:`eval.bench_report`, the bench's scope and
calls :mod:`eval.bench_calls`.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import json
import os
import shutil
import statistics
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import tantivy

from engram.index_data.ingest import ingest_corpus
from engram.index_data.readers import VectorSource, read_beir
from engram.index_data.records import build_payload, record_id_for
from engram.ranking import EMBED_BATCH, HYBRID_PROFILE, encode_queries, passages
from engram.service.engine import index_document, scope_key

from .bench_calls import BENCH_SCOPE, PURPOSE, bench_context, note_capture_args, search_args
from .bench_report import bench_markdown, write_plots
from .corpus_gen import CHUNK, CorpusSpec, SyntheticCorpus
from .ingest_log import IngestLog
from .load import load_run
from .memory import peak_rss_mb, reset_peak_rss, rss_mb
from .neighbours import exact_top_k, recall_at_10
from .service_memory import measure_service, new_data_directory
from .timing import interleaved, percentiles, process_cpu_s, timed

# The raw scan of every code is timed up to this size (at 10M it reads 3.8 GB a query).
EXACT_SCAN_PROBE_UP_TO = 1_000_000
T = TypeVar("T")
#: The clock ``--ingest-for`` stops the feed by (a test gives the feed one of its own).
clock = time.monotonic


# -- disk ------------------------------------------------------------------------------------


def du_mb(path: Path) -> float:
    total = 0
    if path.is_file():
        return round(path.stat().st_size / 2**20, 2)
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return round(total / 2**20, 2)


def disk_breakdown(data_dir: Path) -> dict[str, float]:
    db = sum(du_mb(p) for p in data_dir.glob("engram.db*"))
    return {
        "store_mb": round(db, 2),
        "lexical_mb": du_mb(data_dir / "index" / "lexical"),
        "semantic_mb": du_mb(data_dir / "index" / "semantic"),
        "keys_mb": du_mb(data_dir / "keys"),
        "total_mb": du_mb(data_dir),
    }


# -- one size --------------------------------------------------------------------------------


def ingest_size(
    size: int,
    root: Path,
    encoder: Any,
    *,
    batch_size: int | None,
    progress: bool,
    say: Callable[[str], None],
    resume: bool = False,
    raw_bulk: bool = True,
    ingest_minutes: float | None = None,
) -> tuple[dict[str, Any], np.ndarray, Any]:
    """Generate the corpus and ingest it (figures also kept in ``root/ingest.json``).
    ``resume``: a run stopped during its ingest left ``root``: keep it, and ingest what
    it lacks (the rate is this run's). The records stored are a prefix of the corpus
    (batches commit in order, and a load stops at its first failed batch), so the feed
    starts at the chunk where that prefix ends: at millions of records, examining every
    stored record again only to skip it took about as long as storing it.
    ``raw_bulk``: then have the raw engines index the same batches, for the ratio (at
    10M records that pass takes hours of its own).
    ``ingest_minutes``: stop feeding the corpus after this long; what was stored is
    indexed and checkpointed, and the vectors returned are that prefix's, so the rest of
    the run measures the size reached (``stopped_at``), and a later ``resume`` continues
    it with nothing to embed again."""
    from engram.service.engine import Engine

    corpus = SyntheticCorpus(corpus_spec(size, encoder))
    out: dict[str, Any] = {}
    if resume and (root / "vectors.npy").is_file():
        say(f"[n={size}] resuming the ingest a stopped run left in {root}")
        vectors = np.load(root / "vectors.npy", mmap_mode="r")
        out["resumed"] = True
    else:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        t = time.perf_counter()
        # Written under another name and renamed once whole: a resumed run trusts the file.
        corpus.write_vectors(str(root / "vectors.partial.npy"))
        os.replace(root / "vectors.partial.npy", root / "vectors.npy")
        vectors = np.load(root / "vectors.npy", mmap_mode="r")
        out["generate_vectors_s"] = round(time.perf_counter() - t, 2)
    batch = batch_size or int(min(20_000, max(1_000, size // 20)))
    gc.collect()
    reset_peak_rss()
    rss_before = rss_mb()
    engine = Engine.open(root / "data", encoder=encoder)
    first = 0
    if out.get("resumed"):
        stored = stored_records(engine)
        first = stored - stored % CHUNK
        out["resumed_at"] = first
    say(f"[n={size}] ingest with precomputed vectors, batch {batch}" + (f", from record {first:,}" if first else ""))
    records = corpus.records(first=first)
    if ingest_minutes is not None:
        records = until(clock() + ingest_minutes * 60, records)
    cpu = process_cpu_s(os.getpid())
    report = ingest_corpus(
        engine,
        BENCH_SCOPE,
        records,
        vectors=VectorSource(vectors[first:]),
        batch_size=batch,
        progress=progress,
        total=size - first,
        purpose_ref=PURPOSE,
        on_batch=IngestLog(size, root, say),
    )
    reached = first + report.seen
    if reached < size:
        say(f"[n={size}] ingest stopped after {ingest_minutes} min at {reached:,} records: measuring that size")
        out["stopped_at"] = reached
        vectors = vectors[:reached]
        engine.ranker.checkpoint()  # a later --resume then starts with nothing to embed
    # The loading process's CPU, and its writing worker's where it had one.
    ingest_cpu_s = process_cpu_s(os.getpid()) - cpu + report.worker_cpu_seconds
    out["ingest"] = {**report.as_dict(), "cpu_seconds": round(ingest_cpu_s, 2)}
    out["ingest_records_per_s"] = round(report.ingested_per_s, 1)
    out["rss_mb"] = {"before_ingest": rss_before, "after_ingest": rss_mb(), "peak_during_ingest": peak_rss_mb()}
    rate_line = f"[n={size}] ingest {report.ingested_per_s:,.0f} rec/s ({ingest_cpu_s:.1f} CPU s)"
    if raw_bulk:
        raw = raw_bulk_index(engine, corpus, vectors, batch, root / "raw-lexical")
        passages = raw_passage_index(engine, corpus, vectors, root / "raw-passages")
        out["raw_bulk_index"] = raw
        out["raw_passage_index"] = passages
        for name, anchor in (("raw_bulk_index", raw), ("raw_passage_index", passages)):
            out[f"ingest_over_{name}"] = round(report.ingested_per_s / anchor["records_per_s"], 3)
        out["ingest_cpu_over_raw_bulk_cpu"] = (
            round(ingest_cpu_s / raw["cpu_seconds"], 2) if raw["cpu_seconds"] else None
        )
        out["ingest_cpu_over_raw_passage_cpu"] = (
            round(ingest_cpu_s / passages["cpu_seconds"], 2) if passages["cpu_seconds"] else None
        )
        say(
            f"{rate_line}, raw engines' bulk indexing of the same batches {raw['records_per_s']:,.0f} rec/s "
            f"({raw['cpu_seconds']:.1f} CPU s): ingest / raw {out['ingest_over_raw_bulk_index']}; "
            f"one en_stem field, {PASSAGE_BATCH} a batch {passages['records_per_s']:,.0f} rec/s "
            f"({passages['cpu_seconds']:.1f} CPU s): ingest / raw {out['ingest_over_raw_passage_index']}"
        )
    else:
        say(f"{rate_line} (the raw engines' bulk pass skipped)")
    # A checkpoint still being written holds the previous generation and the new one on
    # disk at once: the footprint is read once it is done.
    engine.ranker.settle()
    out["disk_mb"] = {**disk_breakdown(root / "data"), "vectors_npy_mb": du_mb(root / "vectors.npy")}
    out["store_bytes_per_record"] = store_bytes_per_record(engine, corpus, len(vectors))
    (root / "ingest.json").write_text(json.dumps(out, indent=2) + "\n")
    return out, vectors, engine


def stored_records(engine: Any) -> int:
    """Records of the bench's scope in the store, in any state."""
    return sum(sum(s.counts.records.values()) for s in engine.scope_stats() if tuple(s.scope) == BENCH_SCOPE)


def until(deadline: float, items: Iterable[T]) -> Iterator[T]:
    """``items`` until :data:`clock` passes ``deadline``."""
    for item in items:
        if clock() >= deadline:
            return
        yield item


def raw_bulk_index(
    engine: Any, corpus: SyntheticCorpus, vectors: np.ndarray, batch: int, directory: Path
) -> dict[str, Any]:
    """The raw engines alone indexing what the ingest indexed, in the same batches: per
    batch, Tantivy adds the batch's documents (the ingested records' index documents)
    and commits once, then usearch adds the batch's vectors in one call, on fresh
    indexes built as the channels build theirs (``Ranker.raw_bulk_indexing``). Documents
    are made before the clock starts; the two engines' times add up to the raw rate."""
    shutil.rmtree(directory, ignore_errors=True)
    raw = engine.ranker.raw_bulk_indexing(directory)
    key = scope_key(BENCH_SCOPE)
    seconds = {"tantivy": 0.0, "usearch": 0.0}
    cpu = 0.0
    done = 0
    records = zip(range(len(vectors)), corpus.records())  # the records the ingest stored
    while chunk := [r for _, (_, r) in zip(range(batch), records)]:
        documents = [
            index_document(key, record_id_for(BENCH_SCOPE, r, PURPOSE), build_payload(r, PURPOSE)[0]) for r in chunk
        ]
        rows = np.asarray(vectors[done : done + len(chunk)], dtype=np.float32)
        started_cpu = process_cpu_s(os.getpid())
        t0 = time.perf_counter()
        raw.tantivy(documents)
        t1 = time.perf_counter()
        raw.usearch(rows)
        seconds["tantivy"] += t1 - t0
        seconds["usearch"] += time.perf_counter() - t1
        cpu += process_cpu_s(os.getpid()) - started_cpu
        done += len(chunk)
    del raw
    gc.collect()
    shutil.rmtree(directory, ignore_errors=True)
    return _indexing_figures(done, batch, seconds, cpu)


def _indexing_figures(done: int, batch: int, seconds: dict[str, float], cpu: float) -> dict[str, Any]:
    """A raw anchor's figures: records, batch, seconds (each engine's and their sum),
    CPU seconds and the rate the summed seconds give."""
    total = seconds["tantivy"] + seconds["usearch"]
    return {
        "records": done,
        "batch": batch,
        "seconds": round(total, 3),
        "tantivy_seconds": round(seconds["tantivy"], 3),
        "usearch_seconds": round(seconds["usearch"], 3),
        "cpu_seconds": round(cpu, 2),
        "records_per_s": round(done / total, 1) if total else 0.0,
    }


#: Records per batch of :func:`raw_passage_index`: a Tantivy commit and a usearch add each.
PASSAGE_BATCH = 512
#: Tantivy's writer for :func:`raw_passage_index`: 64 MB, one thread.
PASSAGE_WRITER = (64_000_000, 1)


def raw_passage_index(engine: Any, corpus: SyntheticCorpus, vectors: np.ndarray, directory: Path) -> dict[str, Any]:
    """The lightest raw anchor a bulk load is held to: the passages' text in a fresh
    Tantivy index of one ``en_stem`` text field (a 64 MB, one-thread writer, a commit per
    :data:`PASSAGE_BATCH`), and the same vectors added to a usearch graph with the
    profile's parameters (``Ranker.raw_bulk_indexing``: inner product, int8 codes as the
    channel makes them) in the same batches. Lighter than :func:`raw_bulk_index`, which
    indexes the channel's own fields, so the ratio to it is the lower of the two."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=False, tokenizer_name="en_stem")
    index = tantivy.Index(builder.build(), path=str(directory))
    writer = index.writer(*PASSAGE_WRITER)
    add_vectors = engine.ranker.raw_bulk_indexing(directory / "channel").usearch
    seconds = {"tantivy": 0.0, "usearch": 0.0}
    cpu = 0.0
    done = 0
    records = zip(range(len(vectors)), corpus.records())  # the records the ingest stored
    while chunk := [r.text for _, (_, r) in zip(range(PASSAGE_BATCH), records)]:
        rows = np.asarray(vectors[done : done + len(chunk)], dtype=np.float32)
        started_cpu = process_cpu_s(os.getpid())
        t0 = time.perf_counter()
        for text in chunk:
            writer.add_document(tantivy.Document(text=text))
        writer.commit()
        t1 = time.perf_counter()
        add_vectors(rows)
        seconds["tantivy"] += t1 - t0
        seconds["usearch"] += time.perf_counter() - t1
        cpu += process_cpu_s(os.getpid()) - started_cpu
        done += len(chunk)
    del writer, index, add_vectors
    gc.collect()
    shutil.rmtree(directory, ignore_errors=True)
    return _indexing_figures(done, PASSAGE_BATCH, seconds, cpu)


def store_bytes_per_record(engine: Any, corpus: SyntheticCorpus, size: int, sample: int = 1000) -> dict[str, Any]:
    """The store's bytes per record, per table (indexes and page slack included), and
    what is left beyond the record's own text (UTF-8 bytes, mean of a sample)."""
    tables = engine.operator.store_footprint()
    texts = [len(r.text.encode()) for _, r in zip(range(sample), corpus.records())]
    total = sum(tables.values()) / size
    text = statistics.fmean(texts) if texts else 0.0
    # beyond = total - text of the rounded figures, so the three always add up
    return {
        "total": round(total),
        "text": round(text),
        "beyond_text": round(total) - round(text),
        "tables": {name: round(b / size) for name, b in sorted(tables.items(), key=lambda kv: -kv[1]) if b / size >= 1},
    }


def corpus_spec(size: int, encoder: Any) -> CorpusSpec:
    return CorpusSpec(size=size, dim=int(getattr(encoder, "dim", 384)), topics=300 if size >= 5000 else 20)


def bench_size(
    size: int,
    work: Path,
    encoder: Any,
    *,
    queries: int,
    batch_size: int | None,
    progress: bool,
    reuse: bool,
    say: Callable[[str], None],
    hnswlib_up_to: int = 0,
    resume: bool = False,
    raw_bulk: bool = True,
    ingest_minutes: float | None = None,
) -> tuple[dict[str, Any], Any]:
    from engram.service.engine import Engine

    root = work / f"n{size}"
    reused = reuse and (root / "ingest.json").is_file() and (root / "vectors.npy").is_file()
    if reused:
        say(f"[n={size}] reusing the corpus ingested in {root}")
        ingested = json.loads((root / "ingest.json").read_text())
        vectors = np.load(root / "vectors.npy", mmap_mode="r")[: ingested.get("stopped_at", size)]
        engine = Engine.open(root / "data", encoder=encoder)
    else:
        ingested, vectors, engine = ingest_size(
            size,
            root,
            encoder,
            batch_size=batch_size,
            progress=progress,
            say=say,
            resume=resume,
            raw_bulk=raw_bulk,
            ingest_minutes=ingest_minutes,
        )
    # Opted in at once, so the directory serves agents' calls (the MCP runs, the lone
    # server, and whoever opens it after the bench) however the run goes on or ends.
    engine.operator.set_tenant_enabled(BENCH_SCOPE[0], True)
    out: dict[str, Any] = {
        "size": len(vectors),  # what is measured: fewer than ``size`` when the ingest was stopped
        "corpus_size": size,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "reused_ingest": reused,
        **ingested,
    }
    corpus = SyntheticCorpus(corpus_spec(size, encoder))
    key = scope_key(BENCH_SCOPE)
    texts, qvecs = corpus.queries(queries)
    ctx = bench_context()
    ranker = engine.ranker
    say(f"[n={size}] search latency ({queries} queries)")
    config = HYBRID_PROFILE.config
    assert config.semantic is not None
    lexical_k, semantic_k = config.lexical.cap, config.semantic.cap
    precision = config.semantic.query_precision
    expansion = config.semantic.expansion_for(len(vectors))  # one passage per record
    rescored = config.semantic.rescore_for(10)  # candidates a walk for the top 10 rescores
    raw = ranker.raw_engines(key, HYBRID_PROFILE)
    vectors_q = list(qvecs)
    probes: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
        "engine_hybrid": (
            lambda q: engine.execute("engram_memory_search", ctx, search_args(q, "lexical_and_semantic")),
            texts,
        ),
        "ranker_hybrid_no_store": (
            lambda q: ranker.search(key, q, HYBRID_PROFILE, valid_as_of_ms=2_000_000_000_000),
            texts,
        ),
        "lexical_channel": (lambda q: raw.lexical_channel(q, lexical_k), texts),
        # The encoder as the profile runs it on a query (its query precision).
        "raw_encoder_query": (lambda q: encode_queries(encoder, [q], precision), texts),
        "raw_tantivy_candidates": (lambda q: raw.tantivy(q, lexical_k), texts),
        "raw_hnsw_candidates": (lambda v: raw.knn(v, semantic_k, max(expansion, semantic_k)), vectors_q),
        "raw_hnsw_k10_ef128": (lambda v: raw.knn(v, 10, 128), vectors_q),
    }
    if len(vectors) <= EXACT_SCAN_PROBE_UP_TO:  # past it, every probe reads gigabytes of rows
        probes["raw_exact_scan_candidates"] = (lambda v: raw.knn(v, semantic_k, None), vectors_q)
    torch_backend = getattr(encoder, "torch", None)  # the bulk backend, for reference
    if torch_backend is not None:
        probes["raw_torch_encoder_query"] = (lambda q: torch_backend.encode([q]), texts)
    samples = interleaved(probes)
    samples.setdefault("raw_torch_encoder_query", [])
    samples.setdefault("raw_exact_scan_candidates", [])
    hits = [
        len(engine.execute("engram_memory_search", ctx, search_args(q, "lexical_and_semantic"))["records"])
        for q in texts[:20]
    ]

    # HNSW recall@10 against exact search; labels are ordinals when every record has one
    # vector and none was refused (checked).
    first = next(corpus.records())
    aligned = not out["ingest"]["refused"] and raw.label_record(0) == record_id_for(BENCH_SCOPE, first, PURPOSE)
    recall: dict[str, Any] = {"aligned_labels": aligned, "engine_ef": max(expansion, rescored)}
    if aligned:
        sample = np.asarray(qvecs[: min(200, len(qvecs))])
        exact = exact_top_k(vectors, sample, 10)
        # A walk is at least as deep as the candidates it hands to rescoring.
        efs = sorted({ef for ef in (16, 64, 128, 256, 512, 1024, 2048, 4096) if ef >= rescored} | {expansion})
        for ef in efs:
            t0 = time.perf_counter()
            labels = raw.knn(sample, 10, ef)
            per_q = (time.perf_counter() - t0) / len(sample) * 1000
            recall[f"ef{ef}"] = {"recall@10": recall_at_10(labels, exact), "ms_per_query_batched": round(per_q, 3)}
    out["hnsw_recall"] = recall
    out.setdefault("rss_mb", {})["after_search"] = rss_mb()
    if aligned and len(vectors) <= hnswlib_up_to and importlib.util.find_spec("hnswlib") is not None:
        say(f"[n={size}] hnswlib over the same vectors, beside the engine's index")
        out["hnswlib_beside"] = hnswlib_beside(vectors, sample, exact, efs, root)
    return out | {
        "depths": {"lexical": lexical_k, "semantic": semantic_k},
        # how the engine's semantic channel searches a scope of this size
        "semantic_scan": config.semantic.scans(len(vectors)),
        "latency": {name: percentiles(values) for name, values in samples.items()},
        "hybrid_hits_first20": hits,
        "_texts": texts,
        "_root": str(root),
    }, engine


def hnswlib_beside(
    vectors: np.ndarray, sample: np.ndarray, exact: np.ndarray, efs: list[int], scratch: Path
) -> dict[str, Any]:
    """hnswlib (the engine before usearch) built over the same vectors with the profile's
    graph parameters, float32: build seconds, bytes, and recall@10 and batched ms per
    query at the same ``ef`` values as the engine's index, in the same run."""
    from .ann_compare import EngineSpec, build, default_threads

    graph = HYBRID_PROFILE.config.semantic
    assert graph is not None
    spec = EngineSpec("hnswlib", graph.connectivity, graph.expansion_add)
    t = time.perf_counter()
    index, _, set_ef, save = build(spec, np.asarray(vectors, dtype=np.float32), default_threads())
    out: dict[str, Any] = {
        "m": spec.m,
        "ef_construction": spec.ef_construction,
        "build_s": round(time.perf_counter() - t, 1),
    }
    path = scratch / "hnswlib-beside.bin"
    save(path)
    out["index_mb"] = du_mb(path)
    out["recall"] = {}
    path.unlink()
    for ef in efs:
        set_ef(ef)
        t = time.perf_counter()
        labels, _ = index.knn_query(sample, k=10)
        per_q = (time.perf_counter() - t) / len(sample) * 1000
        out["recall"][f"ef{ef}"] = {"recall@10": recall_at_10(labels, exact), "ms_per_query_batched": round(per_q, 3)}
    return out


def lexical_pass(root: Path, texts: list[str]) -> dict[str, float]:
    """Lexical-profile latency through the engine reopened without the model."""
    from engram.service.engine import Engine

    engine = Engine.open(root / "data", load_model=False)
    try:
        ctx = bench_context()
        samples = timed(lambda q: engine.execute("engram_memory_search", ctx, search_args(q, "lexical")), texts)
    finally:
        engine.close()
    return percentiles(samples)


def encoder_bound_ingest(work: Path, encoder: Any, sample: int, say: Callable[[str], None]) -> dict[str, Any]:
    """The ingest pipeline against the encoder, in one run on the same records: the
    encoder alone on exactly the passages ingestion embeds (in the ranker's batches);
    ingest with the model embedding every record (encoder-bound: the pipeline should
    keep the encoder busy, so its wall time is the encoder's busy time); and ingest of
    the same records with the encoder's vectors precomputed (the pipeline's ceiling,
    what it can feed a faster encoder such as a GPU)."""
    from engram.service.engine import Engine

    cran = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"  # ../shared, when present
    if (cran / "corpus.jsonl").exists():
        records, source = [r for r in read_beir(cran) if r.text.strip()][:sample], "cranfield abstracts"
    else:
        records, source = list(SyntheticCorpus(CorpusSpec(size=sample, seed=3)).records()), "synthetic"
    windows = [passages(unicodedata.normalize("NFC", r.text).strip()) for r in records]
    flat = [w for ws in windows for w in ws]
    say(f"encoder alone on the {len(flat)} passages of {len(records)} {source}")
    t = time.perf_counter()
    rows = [encoder.encode(flat[start : start + EMBED_BATCH]) for start in range(0, len(flat), EMBED_BATCH)]
    raw_per_s = len(records) / (time.perf_counter() - t)
    precomputed = VectorSource(np.vstack(rows), np.cumsum([0] + [len(ws) for ws in windows]))
    reports = {}
    for name, vectors in (("encoder-bound", None), ("precomputed", precomputed)):
        root = work / name
        shutil.rmtree(root, ignore_errors=True)
        engine = Engine.open(root, encoder=encoder)
        try:
            say(f"{name} ingest of {len(records)} {source}")
            reports[name] = ingest_corpus(
                engine,
                ("bench", "encoder"),
                records,
                vectors=vectors,
                batch_size=64,
                progress=False,
                purpose_ref=PURPOSE,
            )
        finally:
            engine.close()
    bound, ceiling = reports["encoder-bound"], reports["precomputed"]
    words = statistics.fmean(len(r.text.split()) for r in records)
    return {
        "records": len(records),
        "source": source,
        "mean_words": round(words, 1),
        "passages": len(flat),
        "records_per_s": round(bound.ingested_per_s, 2),
        "embed_seconds": round(bound.embed_seconds, 2),
        "seconds": round(bound.seconds, 2),
        "raw_encoder_records_per_s": round(raw_per_s, 2),
        "ingest_over_raw_encoder": round(bound.ingested_per_s / raw_per_s, 3),
        "encoder_busy_share": round(bound.embed_seconds / bound.seconds, 3) if bound.seconds else 0.0,
        "precomputed_records_per_s": round(ceiling.ingested_per_s, 1),
        "stages": {
            name: {k: v for k, v in r.as_dict().items() if k.endswith("_seconds") or k == "seconds"}
            for name, r in reports.items()
        },
    }


# -- first calls on fresh data directories --------------------------------------------------

#: The fresh-directory cases: records already in the scope when the server starts.
FRESH_SCOPE_RECORDS = (0, 10)
FRESH_ROUNDS = 5  # capture, admission, search: the first, then four later ones


def _offset_capture_args(offset: int, run: str, n: int) -> dict[str, Any]:
    """The n-th capture after ``offset`` already stored ones, as one client of ``run``."""
    return note_capture_args(offset + n, 0, run)


def fresh_first_calls(
    work: Path, encoder: Any, run: str, *, say: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """Each tool's first call after ``/readyz`` against its later ones on a fresh data
    directory, one per entry of :data:`FRESH_SCOPE_RECORDS`: made as a new user makes it
    (:func:`~eval.service_memory.new_data_directory`), then, for a scope of N records, N
    captures admitted through the engine; then ``engram serve`` starts on it (the empty
    one as a new user's first start: it exports the query encoder before ready) and runs
    :data:`FRESH_ROUNDS` rounds of capture, request_admission and search, the first of
    which creates the scope when it is empty. The sizes' table above measures first calls
    only on large directories the bench already used."""
    from engram.ranking import MiniLMEncoder
    from engram.service.engine import Engine

    ctx = bench_context()
    queries = ["nightly compaction job replicas shard", "load run note of run"]
    rows = []
    for records in FRESH_SCOPE_RECORDS:
        data_dir = work / "fresh" / f"records-{records}" / "data"
        shutil.rmtree(data_dir.parent, ignore_errors=True)
        new_data_directory(data_dir, BENCH_SCOPE[0])
        if records:
            engine = Engine.open(data_dir, encoder=encoder)
            try:
                for n in range(records):
                    captured = engine.execute("engram_memory_capture", ctx, note_capture_args(n, 0, run))
                    engine.execute(
                        "engram_memory_request_admission",
                        ctx,
                        {"candidate_id": captured["candidate_id"], "idempotency_key": f"bench-fresh-{n}-{run}"},
                    )
            finally:
                engine.close()
        say(f"[fresh, {records} records] engram serve on a new data directory, {FRESH_ROUNDS} rounds")
        measured = measure_service(
            data_dir,
            BENCH_SCOPE,
            PURPOSE,
            queries,
            model=isinstance(encoder, MiniLMEncoder),
            # The empty case starts as a new user's first start does, exporting the query
            # encoder; the other had the engine write its scope, so its export is given.
            model_cache=work / "models" if records else None,
            searches=0,
            capture_args=functools.partial(_offset_capture_args, records, run),
            mutations=FRESH_ROUNDS,
            say=say,
        )
        rows.append({"records": records, "service_memory": measured})
    return rows


# -- the whole run ----------------------------------------------------------------------------


def run_bench(
    sizes: list[int],
    out: Path,
    work: Path,
    *,
    queries: int = 200,
    clients: int = 8,
    calls: int = 400,
    encoder_sample: int = 256,
    batch_size: int | None = None,
    progress: bool = True,
    encoder: Any = None,
    load: bool = True,
    reuse: bool = False,
    hnswlib_up_to: int = 100_000,
    service_searches: int = 100,
    fresh: bool = True,
    say: Callable[[str], None] = print,
    resume: bool = False,
    raw_bulk: bool = True,
    ingest_minutes: float | None = None,
    console: bool = False,
) -> dict[str, Any]:
    from engram.ranking import MiniLMEncoder

    out.mkdir(parents=True, exist_ok=True)
    run = uuid.uuid4().hex[:12]  # in every capture's text: see note_capture_args
    work.mkdir(parents=True, exist_ok=True)
    if encoder is None:
        encoder = MiniLMEncoder(work / "models")
        t = time.perf_counter()
        encoder.load()
        say(f"model loaded in {time.perf_counter() - t:.1f} s")
    backend = getattr(encoder, "backend", None)
    name = type(encoder).__name__ + (f" ({backend} for queries)" if backend else "")
    result: dict[str, Any] = {
        "environment": {
            "cpu_count": os.cpu_count(),
            "encoder": name,
            "queries_per_size": queries,
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "sizes": [],
    }
    if encoder_sample:
        result["encoder_bound_ingest"] = encoder_bound_ingest(work, encoder, encoder_sample, say)
    for n, size in enumerate(sizes):
        entry, engine = bench_size(
            size,
            work,
            encoder,
            queries=queries,
            batch_size=batch_size,
            progress=progress,
            reuse=reuse,
            say=say,
            hnswlib_up_to=hnswlib_up_to,
            resume=resume,
            raw_bulk=raw_bulk,
            ingest_minutes=ingest_minutes,
        )
        texts, root = entry.pop("_texts"), Path(entry.pop("_root"))
        try:
            if load and n == 0:
                result["load"] = load_run(engine, root / "data", texts, clients=clients, calls=calls, run=run, say=say)
                if console:
                    from .console_poll import console_polled

                    say("the same load run with the operator console open and polled")
                    with console_polled(engine, root / "data") as polls:
                        beside = load_run(engine, root / "data", texts, clients=clients, calls=calls, run=run, say=say)
                    result["load_with_console"] = {**beside, "console": polls.as_json()}
                    # Without it once more (A, B, A): the first run also warms the engine up.
                    result["load_again"] = load_run(
                        engine, root / "data", texts, clients=clients, calls=calls, run=run, say=say
                    )
        finally:
            engine.close()
        # A closed engine keeps its indexes in memory while referenced: at 10M records
        # that is gigabytes the lone service below would have to find beside its own.
        del engine
        gc.collect()
        entry["latency"]["engine_lexical"] = lexical_pass(root, texts)
        gc.collect()
        entry["rss_mb"]["before_service"] = rss_mb()
        # The size's figures so far are kept before the service runs: a run that ends
        # there (killed, out of memory) keeps what it measured.
        result["sizes"].append(entry)
        keep(out, result)
        if service_searches:
            say(f"[n={size}] the service alone: engram serve on this directory, {service_searches} searches")
            entry["service_memory"] = measure_service(
                root / "data",
                BENCH_SCOPE,
                PURPOSE,
                texts,
                model=isinstance(encoder, MiniLMEncoder),
                model_cache=work / "models",
                searches=service_searches,
                capture_args=lambda n: note_capture_args(n, clients + 1, run),
                say=say,
            )
        lat = entry["latency"]
        entry["ratios_p50"] = raw_ratios(lat, result.get("load") if n == 0 else None, scan=entry["semantic_scan"])
        entry["rss_mb"]["end"] = rss_mb()
        keep(out, result)
        say(
            f"[n={size}] done: ingest {entry['ingest_records_per_s']} rec/s"
            f" ({entry.get('ingest_over_raw_bulk_index', '-')} of the raw engines' bulk indexing,"
            f" {entry.get('ingest_over_raw_passage_index', '-')} of one en_stem field's), hybrid p50 "
            f"{lat['engine_hybrid']['p50_ms']} ms, lexical p50 {lat['engine_lexical']['p50_ms']} ms"
        )
    if fresh:
        result["fresh_first_calls"] = fresh_first_calls(work, encoder, run, say=say)
    keep(out, result)
    plots = write_plots(result, out)
    (out / "report.md").write_text(bench_markdown(result, plots))
    return result


def keep(out: Path, result: dict[str, Any]) -> None:
    """The run's figures so far, in ``out/bench.json``."""
    (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")


def raw_ratios(lat: dict[str, Any], load: dict[str, Any] | None, *, scan: bool) -> dict[str, float]:
    """p50 of each service path over the p50 sum of the raw engines it runs: the encoder,
    Tantivy, and the semantic index searched as the engine searches it (every code
    scored when ``scan``, else the graph). The graph sum is kept beside: the raw engines as
    encoder + Tantivy + HNSW."""
    base = lat["raw_encoder_query"]["p50_ms"] + lat["raw_tantivy_candidates"]["p50_ms"]
    raw_graph = base + lat["raw_hnsw_candidates"]["p50_ms"]
    raw_hybrid = base + lat["raw_exact_scan_candidates"]["p50_ms"] if scan else raw_graph
    out = {
        "raw_hybrid_sum_ms": round(raw_hybrid, 3),
        "engine_hybrid_over_raw_sum": round(lat["engine_hybrid"]["p50_ms"] / raw_hybrid, 2),
        "raw_hybrid_sum_graph_ms": round(raw_graph, 3),
        "engine_hybrid_over_raw_sum_graph": round(lat["engine_hybrid"]["p50_ms"] / raw_graph, 2),
        "engine_lexical_over_raw_tantivy": round(
            lat["engine_lexical"]["p50_ms"] / lat["raw_tantivy_candidates"]["p50_ms"], 2
        ),
        "encoder_share_of_engine_hybrid": round(lat["raw_encoder_query"]["p50_ms"] / lat["engine_hybrid"]["p50_ms"], 2),
    }
    torch_query = lat.get("raw_torch_encoder_query") or {}
    if torch_query:
        # The same engine against raw engines that encode the query with torch instead.
        raw_torch = raw_hybrid - lat["raw_encoder_query"]["p50_ms"] + torch_query["p50_ms"]
        out["raw_hybrid_sum_torch_ms"] = round(raw_torch, 3)
        out["engine_hybrid_over_raw_sum_torch"] = round(lat["engine_hybrid"]["p50_ms"] / raw_torch, 2)
    for name, key in (
        ("single_client_search_hybrid", "mcp_hybrid_over_raw_sum"),
        ("bare_http_search_hybrid", "bare_http_hybrid_over_raw_sum"),
    ):
        sample = (load or {}).get(name)
        if sample:
            out[key] = round(sample["p50_ms"] / raw_hybrid, 2)
            out[key.replace("raw_sum", "engine")] = round(sample["p50_ms"] / lat["engine_hybrid"]["p50_ms"], 2)
    return out
