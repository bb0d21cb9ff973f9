"""Offline relevance evaluation, benchmarks and their reports (the `eval` extra).

An outer room: it drives the engine and the ranker through their package surfaces
(``engram.service.engine``, ``engram.ranking``) and the MCP endpoint, and nothing
imports it but the CLI's plugin table. Its surface is its modules.
"""

__all__ = [
    "ann_cli",
    "ann_compare",
    "bench",
    "bench_calls",
    "bench_cli",
    "bench_report",
    "cli",
    "client_storm",
    "console_poll",
    "console_timing",
    "corpus_gen",
    "extra",
    "failover_bench",
    "formation",
    "fts5_peer",
    "fusion_cli",
    "fusion_fit",
    "ingest_log",
    "load",
    "locomo",
    "locomo_cli",
    "memory",
    "metrics",
    "neighbours",
    "purge_timing",
    "raw_engines",
    "relevance",
    "replica_bench",
    "report",
    "results",
    "scope_hold",
    "search_cpu",
    "service_memory",
    "shard_plan",
    "soak",
    "timing",
]
