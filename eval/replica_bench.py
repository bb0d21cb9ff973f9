"""Store benchmark: the same synthetic corpus and queries on SQLite and on a shared
PostgreSQL store, with one replica and with two.

Why: a deployment choosing `--database-url` wants to know what the shared store costs
against the embedded one on the same machine, and how a second replica behaves: its
catch-up from the journal when it starts on an existing database, and search latency
when calls alternate between the two replicas. Each store gets the corpus through the
same public ingestion path (precomputed vectors, the real query encoder for searches).
Two replicas here are two engines in one process (one interpreter, so this shows
latency per call, not the throughput of two machines).

    engram bench --sizes 10000 --database-url postgresql://... --no-load --encoder-sample 0
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram.index_data.ingest import ingest_corpus
from engram.index_data.readers import VectorSource

from .bench import PURPOSE, bench_context, corpus_spec, percentiles, search_args, timed
from .corpus_gen import SyntheticCorpus


def replica_bench(
    size: int,
    work: Path,
    encoder: Any,
    database_url: str,
    *,
    queries: int,
    batch_size: int | None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Ingest rate and hybrid p50/p99: SQLite, PostgreSQL with one replica, and two."""
    from engram.service.engine.engine import Engine

    root = work / f"stores-n{size}"
    root.mkdir(parents=True, exist_ok=True)
    corpus = SyntheticCorpus(corpus_spec(size, encoder))
    vectors = corpus.write_vectors(str(root / "vectors.npy"))
    texts, _ = corpus.queries(queries)
    batch = batch_size or int(min(20_000, max(1_000, size // 20)))
    scope = ("bench", "stores-" + uuid.uuid4().hex[:8])  # never collides with an earlier run
    ctx = bench_context()
    ctx = type(ctx)(**{**ctx.__dict__, "tenant": scope[0], "workspace": scope[1]})
    out: dict[str, Any] = {"size": size, "queries": len(texts)}

    def hybrid(engines: list[Any]) -> dict[str, float]:
        turn = iter(range(1 << 30))
        return percentiles(
            timed(
                lambda q: engines[next(turn) % len(engines)].execute(
                    "engram_memory_search", ctx, search_args(q, "lexical_and_semantic")
                ),
                texts,
            )
        )

    for name, url in (("sqlite", None), ("postgres", database_url)):
        say(f"[stores n={size}] {name}: ingest")
        engine = Engine.open(root / name / "a", encoder=encoder, database_url=url, key_dir=root / name / "keys")
        engine.set_tenant_enabled(scope[0], True)
        report = ingest_corpus(
            engine,
            scope,
            corpus.records(),
            vectors=VectorSource(vectors),
            batch_size=batch,
            progress=False,
            total=size,
            purpose_ref=PURPOSE,
        )
        entry: dict[str, Any] = {
            "ingest_records_per_s": round(report.ingested_per_s, 1),
            "hybrid_one_replica": hybrid([engine]),
        }
        if url is not None:
            say(f"[stores n={size}] {name}: a second replica catches up from the journal")
            t = time.perf_counter()
            second = Engine.open(root / name / "b", encoder=encoder, database_url=url, key_dir=root / name / "keys")
            entry["second_replica_catch_up_s"] = round(time.perf_counter() - t, 2)
            entry["second_replica_catch_up_records_per_s"] = round(size / max(time.perf_counter() - t, 1e-9), 1)
            entry["hybrid_two_replicas_alternating"] = hybrid([engine, second])
            second.close()
        engine.close()
        out[name] = entry
        say(f"[stores n={size}] {name}: {entry}")
    return out
