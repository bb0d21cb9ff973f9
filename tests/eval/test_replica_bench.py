"""The store benchmark runs end to end on a tiny corpus (hashing encoder, real
PostgreSQL): both stores ingest, a second replica opens on the database, and every
latency series has all its queries."""

from __future__ import annotations

from pathlib import Path

from engram.eval.replica_bench import replica_bench


def test_store_bench_on_a_tiny_corpus(tmp_path: Path, database_url: str, encoder) -> None:
    out = replica_bench(120, tmp_path, encoder, database_url, queries=12, batch_size=50, say=lambda _m: None)
    assert out["sqlite"]["ingest_records_per_s"] > 0 and out["postgres"]["ingest_records_per_s"] > 0
    assert out["postgres"]["second_replica_catch_up_s"] >= 0
    for lat in (
        out["sqlite"]["hybrid_one_replica"],
        out["postgres"]["hybrid_one_replica"],
        out["postgres"]["hybrid_two_replicas_alternating"],
    ):
        assert lat["n"] == 12 and lat["p99_ms"] >= lat["p50_ms"] > 0
    assert out["postgres_over_sqlite_p50"] > 0
