"""`engram bench-ann`: the two HNSW engines side by side on the same vectors, one run.

Why: the semantic channel's engine and graph parameters (``SemanticConfig``) are chosen
by measurement, not by reputation. This builds hnswlib and usearch indexes over the same
vectors for a small grid of connectivity (M), search expansion (ef) and, for usearch,
storage type (f32 / f16 / i8), and reports for each: recall@10 against exact inner
product, p50/p99 of one query at a time (as the service asks), build seconds, RAM the
built index holds (what the engine reports, and the RSS growth of a child process that
builds only it) and bytes on disk.

Vector sets: ``synthetic`` draws the capacity bench's corpus (:mod:`eval.corpus_gen`,
low-rank topical vectors) at a given size; ``real`` concatenates MiniLM passage vectors
precomputed as ``.npz`` files (``vectors`` and ``query_vectors`` arrays, the layout
``engram eval --vectors`` reads) with every file's queries.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import json
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .corpus_gen import CorpusSpec, SyntheticCorpus
from .memory import rss_mb
from .neighbours import exact_top_k, recall_at_10

K = 10


@dataclass(frozen=True)
class EngineSpec:
    """One index configuration to build (``dtype`` only matters to usearch)."""

    engine: str  # "hnswlib" or "usearch"
    m: int
    ef_construction: int
    dtype: str = "f32"

    @property
    def label(self) -> str:
        return f"{self.engine} M{self.m} {self.dtype}"


def build(
    spec: EngineSpec, vectors: np.ndarray, threads: int
) -> tuple[Any, Callable[[np.ndarray, int], np.ndarray], Callable[[int], None], Callable[[Path], object]]:
    """The built index, ``knn(query, k) -> labels``, ``set_ef(ef)`` and ``save(path)``."""
    n, dim = vectors.shape
    labels = np.arange(n, dtype=np.int64)
    if spec.engine == "hnswlib":
        import hnswlib

        index = hnswlib.Index(space="ip", dim=dim)
        index.init_index(max_elements=n, M=spec.m, ef_construction=spec.ef_construction)
        index.add_items(vectors, labels, num_threads=threads)
        return (index, lambda q, k: index.knn_query(q, k=k)[0][0], index.set_ef, lambda p: index.save_index(str(p)))
    from usearch.index import Index

    index = Index(
        ndim=dim,
        metric="ip" if spec.dtype != "i8" else "cos",
        dtype=spec.dtype,
        connectivity=spec.m,
        expansion_add=spec.ef_construction,
    )
    index.add(labels, vectors, threads=threads)

    def set_ef(ef: int) -> None:
        index.expansion_search = ef  # type: ignore[misc]  # usearch's setter is unannotated

    return index, lambda q, k: index.search(q, k).keys, set_ef, lambda p: index.save(str(p))


def _measure_one(
    spec: EngineSpec, vectors_path: str, queries: np.ndarray, exact: np.ndarray, efs: list[int], threads: int
) -> dict[str, Any]:
    """Runs in a child process, so the RAM figure is this index's alone."""
    gc.collect()
    base = rss_mb()
    vectors = np.array(np.load(vectors_path, mmap_mode="r"), dtype=np.float32)
    t = time.perf_counter()
    index, knn, set_ef, save = build(spec, vectors, threads)
    build_s = time.perf_counter() - t
    del vectors
    gc.collect()
    ram = rss_mb() - base
    # What the engine says it holds (hnswlib's memory layout is its file's).
    held = index.memory_usage if spec.engine == "usearch" else None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "index.bin"
        save(path)
        disk = path.stat().st_size
    held = disk if held is None else held
    rows: list[dict[str, Any]] = []
    for ef in efs:
        set_ef(ef)
        for q in queries[:5]:
            knn(q, K)
        seconds, found = [], []
        for q in queries:
            t = time.perf_counter()
            found.append(knn(q, K))
            seconds.append(time.perf_counter() - t)
        recall = recall_at_10(np.vstack(found), exact)
        ms = np.asarray(seconds) * 1000
        rows.append(
            {
                **asdict(spec),
                "ef": ef,
                "recall@10": recall,
                "p50_ms": round(float(np.percentile(ms, 50)), 3),
                "p99_ms": round(float(np.percentile(ms, 99)), 3),
                "build_s": round(build_s, 1),
                "index_mb": round(held / 2**20, 1),
                "rss_growth_mb": round(ram, 1),
                "disk_mb": round(disk / 2**20, 1),
            }
        )
    return {"rows": rows}


def _in_child(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        return pool.apply(fn, args)


def real_vectors(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """Passage vectors and query vectors of several ``.npz`` files, concatenated."""
    vectors, queries = [], []
    for path in files:
        with np.load(path) as data:
            vectors.append(np.asarray(data["vectors"], dtype=np.float32))
            if "query_vectors" in data.files:
                queries.append(np.asarray(data["query_vectors"], dtype=np.float32))
    return np.vstack(vectors), np.vstack(queries)


def synthetic_vectors(size: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    corpus = SyntheticCorpus(CorpusSpec(size=size, topics=300 if size >= 5000 else 20))
    vectors = np.vstack([v for _, v in corpus.chunks()])
    return vectors, corpus.queries(queries)[1]


def compare(
    name: str,
    vectors: np.ndarray,
    queries: np.ndarray,
    specs: list[EngineSpec],
    efs: list[int],
    work: Path,
    threads: int,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Every spec over ``vectors``, each built in its own child process."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{name}.npy"
    np.save(path, vectors)
    say(f"[{name}] {len(vectors):,} vectors, {len(queries)} queries: exact top-{K}")
    exact = exact_top_k(vectors, queries, K)
    rows: list[dict[str, Any]] = []
    for spec in specs:
        say(f"[{name}] {spec.label}")
        result = _in_child(_measure_one, spec, str(path), queries, exact, efs, threads)
        for row in result["rows"]:
            rows.append({"set": name, "n": len(vectors), **row})
            say("   " + json.dumps(rows[-1]))
    path.unlink(missing_ok=True)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| set | n | engine | M | storage | ef | recall@10 | p50 ms | p99 ms | build s | index MiB | RSS growth MiB "
        "| disk MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['n']:,} | {r['engine']} | {r['m']} | {r['dtype']} | {r['ef']} | "
            f"{r['recall@10']:.3f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['build_s']} | "
            f"{r['index_mb']} | {r['rss_growth_mb']} | {r['disk_mb']} |"
        )
    return "\n".join(lines) + "\n"


def run(
    sizes: list[int],
    real: list[Path],
    ms: list[int],
    efs: list[int],
    dtypes: list[str],
    ef_construction: int,
    queries: int,
    out: Path,
    threads: int,
    say: Callable[[str], None] = print,
    hnswlib: bool = True,
) -> list[dict[str, Any]]:
    specs = [EngineSpec("hnswlib", m, ef_construction) for m in ms] if hnswlib else []
    if specs and importlib.util.find_spec("hnswlib") is None:
        say("hnswlib is not installed (it comes with the eval extra): measuring usearch alone")
        specs = []
    specs += [EngineSpec("usearch", m, ef_construction, d) for m in ms for d in dtypes]
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    sets: list[tuple[str, Callable[[], tuple[np.ndarray, np.ndarray]]]] = []
    if real:
        sets.append(("real", lambda: real_vectors(real)))
    sets += [(f"synthetic-{n}", functools.partial(synthetic_vectors, n, queries)) for n in sizes]
    for name, make in sets:
        vectors, qs = make()
        rows += compare(name, vectors, qs[:queries] if name != "real" else qs, specs, efs, out / "work", threads, say)
        del vectors
        (out / "ann.json").write_text(json.dumps(rows, indent=1) + "\n")
        (out / "ann.md").write_text(markdown(rows))
    return rows


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)))
