"""The store benchmark runs end to end on a tiny corpus (hashing encoder, real
PostgreSQL): both stores ingest, a second replica opens on the database, every latency
series has all its queries, and the load run drives `engram serve --workers` 1 and 2
(without the model: lexical searches) with every call answered, its clients split over
two processes that start together."""

from __future__ import annotations

from pathlib import Path

from engram.eval.replica_bench import WorkersLoad, replica_bench


def test_store_bench_on_a_tiny_corpus(tmp_path: Path, database_url: str, encoder) -> None:
    out = replica_bench(
        120,
        tmp_path,
        encoder,
        database_url,
        queries=12,
        batch_size=50,
        say=lambda _m: None,
        workers_load=WorkersLoad(clients=3, calls=30, worker_counts=(2, 1), client_processes=2),
    )
    assert out["sqlite"]["ingest_records_per_s"] > 0 and out["postgres"]["ingest_records_per_s"] > 0
    assert out["postgres"]["second_replica_catch_up_s"] >= 0
    for lat in (
        out["sqlite"]["hybrid_one_replica"],
        out["postgres"]["hybrid_one_replica"],
        out["postgres"]["hybrid_two_replicas_alternating"],
    ):
        assert lat["n"] == 12 and lat["p99_ms"] >= lat["p50_ms"] > 0
    assert out["postgres_over_sqlite_p50"] > 0
    workers = out["postgres"]["workers"]
    assert [run["workers"] for run in workers["runs"]] == [2, 1]
    for run in workers["runs"]:
        assert run["errors"] == {}, run
        # Three clients of ten steps, split 2 + 1 over the two processes: every step's
        # calls are counted (a capture step also requests admission).
        assert run["calls_completed"] >= 30 and run["throughput_calls_per_s"] > 0
        assert run["server_cpu_ms_per_call"] > 0
        # Every call of the run is in some worker's audit log (the sequential searches too).
        assert len(run["calls_per_worker"]) == run["workers"] and sum(run["calls_per_worker"]) >= run["calls_completed"]
    assert set(workers["calls_per_s_over_one_worker"]) == {"1", "2"}
    assert workers["calls_per_s_over_one_worker"]["1"] == 1.0 and workers["calls_per_s_over_one_worker"]["2"] > 0
