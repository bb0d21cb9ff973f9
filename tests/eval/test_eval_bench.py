"""The capacity benchmark's measuring tools, and one tiny run end to end."""

from __future__ import annotations

import gc
import json
import time
import weakref
from pathlib import Path

import numpy as np

from engram.eval.bench import bench_size, run_bench
from engram.eval.bench_calls import BENCH_SCOPE
from engram.eval.neighbours import exact_top_k
from engram.eval.timing import percentiles
from engram.ranking import HYBRID_PROFILE


def test_exact_top_k_matches_argsort():
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((1000, 16)).astype(np.float32)
    queries = rng.standard_normal((5, 16)).astype(np.float32)
    got = exact_top_k(vectors, queries, 10, chunk=97)
    want = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    assert [sorted(a) for a in got.tolist()] == [sorted(b) for b in want.tolist()]


def test_percentiles():
    p = percentiles([0.001 * i for i in range(1, 101)])
    assert p["n"] == 100 and abs(p["p50_ms"] - 50.5) < 1e-6 and p["p99_ms"] > p["p95_ms"] > p["p50_ms"]


def test_tiny_bench_run(tmp_path: Path, encoder):
    out = tmp_path / "out"
    result = run_bench(
        [400],
        out,
        tmp_path / "work",
        queries=12,
        clients=2,
        calls=12,
        encoder_sample=8,
        progress=False,
        encoder=encoder,
        service_searches=12,
        say=lambda _m: None,
    )
    entry = result["sizes"][0]
    assert entry["ingest"]["ingested"] == 400
    raw = entry["raw_bulk_index"]  # the raw engines alone on the same documents and vectors, same batches
    assert raw["records"] == 400 and raw["batch"] == 1000 and raw["records_per_s"] > 0
    assert raw["tantivy_seconds"] > 0 and raw["usearch_seconds"] > 0 and raw["cpu_seconds"] > 0
    ratio = entry["ingest"]["ingested_per_s"] / raw["records_per_s"]
    assert ratio > 0 and abs(entry["ingest_over_raw_bulk_index"] - ratio) < 0.01
    # the lightest anchor: one en_stem text field, a commit and a graph add per 512 records
    light = entry["raw_passage_index"]
    assert light["records"] == 400 and light["batch"] == 512 and light["cpu_seconds"] > 0
    assert light["tantivy_seconds"] > 0 and light["usearch_seconds"] > 0
    ratio = entry["ingest"]["ingested_per_s"] / light["records_per_s"]
    assert ratio > 0 and abs(entry["ingest_over_raw_passage_index"] - ratio) < 0.01
    assert entry["ingest"]["cpu_seconds"] > 0
    assert entry["hnsw_recall"]["aligned_labels"] is True
    engine_ef = entry["hnsw_recall"]["engine_ef"]  # the int8 walk, rescored from the rows
    assert entry["hnsw_recall"][f"ef{engine_ef}"]["recall@10"] > 0.9
    beside = entry["hnswlib_beside"]  # the engine before usearch, on the same vectors
    assert beside["recall"][f"ef{engine_ef}"]["recall@10"] > 0.9 and beside["index_mb"] > 0
    assert beside["m"] == HYBRID_PROFILE.config.semantic.connectivity  # the profile's graph
    assert set(beside["recall"]) == {k for k in entry["hnsw_recall"] if k.startswith("ef")}
    for name in (
        "engine_hybrid",
        "engine_lexical",
        "raw_encoder_query",
        "raw_tantivy_candidates",
        "raw_hnsw_candidates",
        "raw_exact_scan_candidates",
        "raw_hnsw_k10_ef128",
    ):
        assert entry["latency"][name]["p50_ms"] > 0
    ratios = entry["ratios_p50"]
    # 400 vectors: the engine scans them, so the raw sum holds the scan, not the graph
    lat = entry["latency"]
    assert entry["semantic_scan"] is True
    assert ratios["raw_hybrid_sum_ms"] == round(
        sum(
            lat[name]["p50_ms"] for name in ("raw_encoder_query", "raw_tantivy_candidates", "raw_exact_scan_candidates")
        ),
        3,
    )
    assert ratios["raw_hybrid_sum_graph_ms"] == round(
        sum(lat[name]["p50_ms"] for name in ("raw_encoder_query", "raw_tantivy_candidates", "raw_hnsw_candidates")), 3
    )
    assert ratios["engine_hybrid_over_raw_sum"] > 0 and ratios["mcp_hybrid_over_raw_sum"] > 0
    assert ratios["bare_http_hybrid_over_raw_sum"] > 0
    enc = result["encoder_bound_ingest"]
    assert enc["ingest_over_raw_encoder"] > 0 and enc["precomputed_records_per_s"] > 0
    assert 0 < enc["encoder_busy_share"] <= 1
    assert entry["disk_mb"]["total_mb"] > 0 and entry["rss_mb"]["peak_during_ingest"] > 0
    per = entry["store_bytes_per_record"]
    assert per["tables"]["journal"] > 0 and per["tables"]["records"] > 0 and per["text"] > 0
    assert per["total"] == per["text"] + per["beyond_text"] and per["total"] >= sum(per["tables"].values()) - 10
    assert "Store bytes per record at 400" in (out / "report.md").read_text()
    assert "hnswlib over the same vectors at 400" in (out / "report.md").read_text()
    assert "searches an index of this size by scanning every code" in (out / "report.md").read_text()
    load = result["load"]
    assert "skipped" not in load, load
    assert load["bare_http_search_hybrid"]["n"] == 12  # every bare JSON-RPC search answered ok
    assert load["bare_http_server_cpu_ms_per_search"] > 0  # twelve searches, read in whole ticks
    assert "Server CPU per hybrid search" in (out / "report.md").read_text()
    assert load["admitted_not_readable"] == 0 and load["calls_completed"] > 0 and not load["errors"]
    assert load["server_cpu_ms_per_call"] > 0 and load["client_cpu_ms_per_call"] > 0
    assert load["cpu_bound_calls_per_s"] > 0 and "CPU per call: server" in (out / "report.md").read_text()
    served = entry["service_memory"]  # `engram serve` alone on the directory (no model: lexical searches)
    assert "skipped" not in served, served
    assert served["searches"] == {"asked": 12, "answered": 12, "failed": 0}
    for at in (served["after_ready"], served["after_searches"]):
        assert 0 < at["anon_mb"] <= at["rss_mb"] <= served["peak_mb"] and at["file_mb"] > 0
    assert "The service alone" in (out / "report.md").read_text()
    assert served["mutations"] == {"rounds": 5, "admitted": 5}  # each tool's first call after ready, timed
    first = served["first_calls"]
    assert set(first) == {"search", "capture", "request_admission", "search_after_admission"}
    assert first["search"]["calls"] == 12 and first["request_admission"]["calls"] == 5
    assert all(0 < f["later_p50_ms"] <= f["later_max_ms"] and f["first_ms"] > 0 for f in first.values())
    assert "First calls after /readyz" in (out / "report.md").read_text()
    # the same on fresh data directories: a scope the first capture creates, and one of 10 records
    fresh = {row["records"]: row["service_memory"] for row in result["fresh_first_calls"]}
    assert set(fresh) == {0, 10}
    for served_fresh in fresh.values():
        assert "skipped" not in served_fresh, served_fresh
        assert served_fresh["mutations"] == {"rounds": 5, "admitted": 5}
        assert set(served_fresh["first_calls"]) == {"capture", "request_admission", "search_after_admission"}
    assert "First calls after /readyz on a fresh data directory" in (out / "report.md").read_text()
    assert json.loads((out / "bench.json").read_text())["sizes"][0]["size"] == 400
    assert (out / "report.md").exists() and (out / "cost_growth.png").stat().st_size > 0

    again = run_bench(
        [400],
        tmp_path / "again",
        tmp_path / "work",
        queries=12,
        encoder_sample=0,
        load=False,
        reuse=True,
        service_searches=4,
        fresh=False,
        progress=False,
        encoder=encoder,
        say=lambda _m: None,
    )["sizes"][0]
    assert again["reused_ingest"] is True and again["ingest"] == entry["ingest"]
    assert again["hnsw_recall"]["aligned_labels"] is True
    # new captures on the reused directory are admitted (not duplicates of the first run's)
    assert again["service_memory"]["mutations"] == {"rounds": 5, "admitted": 5}


def test_a_bench_directory_is_opted_in_once_ingested(tmp_path: Path, encoder):
    """A directory the bench leaves (kept, reused, or cut short after ingest) serves
    agents' calls when opened later: its tenant is opted in as soon as it is ingested,
    not only when the MCP load run happens to run (the first size, with --load)."""
    from engram.service.engine.engine import Engine

    entry, engine = bench_size(
        200, tmp_path, encoder, queries=10, batch_size=None, progress=False, reuse=False, say=lambda _m: None
    )
    engine.close()
    reopened = Engine.open(Path(entry["_root"]) / "data", encoder=encoder)
    try:
        assert reopened.tenant_enabled(BENCH_SCOPE[0])
        assert reopened.operator.tenants_not_opted_in() == []
    finally:
        reopened.close()


def test_a_size_without_the_raw_bulk_pass_reports_the_ingest_alone(tmp_path: Path, encoder):
    entry, engine = bench_size(
        200,
        tmp_path,
        encoder,
        queries=5,
        batch_size=None,
        progress=False,
        reuse=False,
        say=lambda _m: None,
        raw_bulk=False,
    )
    engine.close()
    assert entry["ingest"]["ingested"] == 200 and entry["ingest_records_per_s"] > 0
    assert "raw_bulk_index" not in entry and "ingest_over_raw_bulk_index" not in entry
    assert "raw_passage_index" not in entry and "ingest_over_raw_passage_index" not in entry
    kept = json.loads((Path(entry["_root"]) / "ingest.json").read_text())
    assert "raw_bulk_index" not in kept and kept["ingest"]["ingested"] == 200


def test_an_ingest_stopped_by_its_time_is_measured_and_resumed_without_embedding(tmp_path: Path, encoder, monkeypatch):
    """--ingest-for: the feed stops when the clock passes the deadline; the records
    stored are measured as the size, and --resume continues from the chunk where they
    end (not from the first record), embedding nothing again at open."""
    from engram.eval import bench
    from engram.service.engine.engine import Engine

    # The clock reads 0 when the deadline is set, then one second more for each record
    # offered to the feed: a deadline 10,501 s away lets 10,500 through.
    ticks = iter(range(10**9))
    monkeypatch.setattr(bench, "clock", lambda: next(ticks))
    size, common = 21_000, {"queries": 5, "batch_size": None, "progress": False, "raw_bulk": False}
    stopped, engine = bench_size(
        size, tmp_path, encoder, reuse=False, say=lambda _m: None, ingest_minutes=10_501 / 60, **common
    )
    engine.close()
    assert stopped["stopped_at"] == stopped["size"] == stopped["ingest"]["ingested"] == 10_500
    assert stopped["corpus_size"] == size
    assert stopped["hnsw_recall"]["aligned_labels"] is True
    assert stopped["hybrid_hits_first20"] and all(n > 0 for n in stopped["hybrid_hits_first20"])

    monkeypatch.setattr(bench, "clock", time.monotonic)
    resumed, engine = bench_size(size, tmp_path, encoder, reuse=False, say=lambda _m: None, resume=True, **common)
    try:
        assert engine.warm_up_tally.embedded == 0  # the stopped run left nothing unindexed
    finally:
        engine.close()
    assert resumed["resumed_at"] == 10_000  # the chunk where the stored records end
    assert resumed["ingest"]["skipped_existing"] == 500 and resumed["ingest"]["ingested"] == size - 10_500
    assert resumed["size"] == size and "stopped_at" not in resumed
    reopened = Engine.open(Path(resumed["_root"]) / "data", encoder=encoder)
    try:
        assert bench.stored_records(reopened) == size
    finally:
        reopened.close()


def test_the_lone_service_runs_beside_no_engine_of_the_bench_and_after_its_figures_are_kept(
    tmp_path: Path, encoder, monkeypatch
):
    """The service alone is measured on a size's directory with every engine the bench
    opened on it released (at 10M records each holds gigabytes of index), and with the
    size's search figures already in bench.json (a run that ends there keeps them)."""
    from engram.eval import bench
    from engram.service.engine.engine import Engine

    opened: list[weakref.ref[Engine]] = []
    real_open = Engine.open.__func__

    def open_and_note(cls, *args, **kwargs):
        engine = real_open(cls, *args, **kwargs)
        opened.append(weakref.ref(engine))
        return engine

    seen: dict[str, object] = {}

    def service(data_dir, *args, **kwargs):
        gc.collect()
        seen["engines_alive"] = sum(ref() is not None for ref in opened)
        seen["kept"] = json.loads((tmp_path / "out" / "bench.json").read_text())
        return {"skipped": "measured by the test"}

    monkeypatch.setattr(Engine, "open", classmethod(open_and_note))
    monkeypatch.setattr(bench, "measure_service", service)
    result = run_bench(
        [300],
        tmp_path / "out",
        tmp_path / "work",
        queries=6,
        encoder_sample=0,
        load=False,
        fresh=False,
        progress=False,
        encoder=encoder,
        service_searches=3,
        say=lambda _m: None,
    )
    assert len(opened) >= 2  # the bench's engine and the lexical pass's
    assert seen["engines_alive"] == 0
    kept = seen["kept"]["sizes"][0]
    assert kept["size"] == 300 and kept["latency"]["engine_hybrid"]["n"] == 6
    assert kept["latency"]["engine_lexical"]["n"] == 6 and "service_memory" not in kept
    assert kept["rss_mb"]["before_service"] > 0
    assert result["sizes"][0]["service_memory"] == {"skipped": "measured by the test"}
