"""Store benchmark: the same synthetic corpus and queries on SQLite and on a shared
PostgreSQL store, with one replica and with two.

Why: a deployment choosing `--database-url` wants to know what the shared store costs
against the embedded one on the same machine, and how a second replica behaves: its
catch-up from the journal when it starts on an existing database, and search latency
when calls alternate between the two replicas. Each store gets the corpus through the
same public ingestion path (precomputed vectors, the real query encoder for searches).
Two replicas here are two engines in one process (one interpreter, so this shows
latency per call, not the throughput of two machines). The stores' searches take turns
query by query (SQLite, PostgreSQL, two PostgreSQL replicas alternating), so the ratio
of their latencies holds whatever else loads the machine.

A new replica joins two ways: from the journal alone (it embeds every record again with
the model; measured up to ``REEMBED_UP_TO`` records, hours beyond), and seeded from the
first replica's exported vectors (``Engine.export_vectors``, then ``Engine.open`` with
``seed_vectors``): the seconds to export, the seconds to ready, and how many records it
took from the seed and embedded.

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

from .bench import PURPOSE, bench_context, corpus_spec, interleaved, percentiles, search_args
from .corpus_gen import SyntheticCorpus

#: A replica that joins from the journal alone re-embeds every record (5 to 25 a second on
#: a CPU): measured up to this size, skipped beyond (the seeded join is measured always).
REEMBED_UP_TO = 5_000
#: The probe of two PostgreSQL replicas answering in turn.
TWO_REPLICAS = "postgres-two-replicas"


def replica_bench(
    size: int,
    work: Path,
    encoder: Any,
    database_url: str,
    *,
    queries: int,
    batch_size: int | None,
    say: Callable[[str], None] = print,
    sqlite: bool = True,
) -> dict[str, Any]:
    """Ingest rate and hybrid p50/p99: SQLite (unless not ``sqlite``), PostgreSQL with one
    replica, and two; a new replica's join from the journal and from a seed."""
    from engram.service.engine import Engine

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

    def search_on(engines: list[Any]) -> Callable[[str], Any]:
        turn = iter(range(1 << 30))
        return lambda q: engines[next(turn) % len(engines)].execute(
            "engram_memory_search", ctx, search_args(q, "lexical_and_semantic")
        )

    opened: dict[str, Any] = {}
    for name, url in ((("sqlite", None),) if sqlite else ()) + (("postgres", database_url),):
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
        opened[name] = engine
        out[name] = {"ingest_records_per_s": round(report.ingested_per_s, 1)}
    pg = opened["postgres"]
    entry = out["postgres"]
    say(f"[stores n={size}] postgres: a replica joins seeded from the first one's vectors")
    t = time.perf_counter()
    exported = pg.export_vectors(root / "postgres" / "seed")
    entry["seed_export_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    second = Engine.open(
        root / "postgres" / "c",
        encoder=encoder,
        database_url=database_url,
        key_dir=root / "postgres" / "keys",
        seed_vectors=root / "postgres" / "seed",
    )
    joined = time.perf_counter() - t
    entry["seeded_replica"] = {
        "join_s": round(joined, 2),
        "records_per_s": round(size / max(joined, 1e-9), 1),
        "seeded": second.warm_up_tally.seeded,
        "embedded": second.warm_up_tally.embedded,
        "seed_passages": exported["passages"],
    }
    if size <= REEMBED_UP_TO:
        say(f"[stores n={size}] postgres: a replica joins from the journal alone (re-embedding)")
        t = time.perf_counter()
        journal_only = Engine.open(
            root / "postgres" / "b", encoder=encoder, database_url=database_url, key_dir=root / "postgres" / "keys"
        )
        entry["second_replica_catch_up_s"] = round(time.perf_counter() - t, 2)
        entry["second_replica_catch_up_records_per_s"] = round(size / max(time.perf_counter() - t, 1e-9), 1)
        second.close()
        second = journal_only
    # Every store's searches take turns query by query, so the machine's load weighs on
    # each alike and the ratio between them holds.
    say(f"[stores n={size}] hybrid searches, the stores taking turns")
    probes = {name: (search_on([engine]), texts) for name, engine in opened.items()}
    probes[TWO_REPLICAS] = (search_on([pg, second]), texts)
    latency = {name: percentiles(samples) for name, samples in interleaved(probes).items()}
    for name in opened:
        out[name]["hybrid_one_replica"] = latency[name]
    entry["hybrid_two_replicas_alternating"] = latency[TWO_REPLICAS]
    if sqlite:
        out["postgres_over_sqlite_p50"] = round(
            out["postgres"]["hybrid_one_replica"]["p50_ms"] / out["sqlite"]["hybrid_one_replica"]["p50_ms"], 3
        )
    second.close()
    for engine in opened.values():
        engine.close()
    say(f"[stores n={size}] {out}")
    return out
