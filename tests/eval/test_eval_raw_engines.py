"""The raw engines alone (the data READMEs' anchors), run query by query."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.eval.raw_engines import RUNS, raw_runs, reciprocal_rank_fusion
from engram.eval.relevance import run_relevance


def test_reciprocal_rank_fusion_sums_one_over_k_plus_rank():
    # "b": 1/(60+2) + 1/(60+1) beats "a": 1/(60+1) alone; "d" (1/62) beats "c" (1/63).
    assert reciprocal_rank_fusion(["a", "b", "c"], ["b", "d"]) == ["b", "a", "d", "c"]
    assert reciprocal_rank_fusion(["a", "b"], ["b", "a"], k=0) == ["a", "b"]  # 1 + 1/2 each: tie, by id
    assert reciprocal_rank_fusion() == []


def test_raw_runs_rank_by_bm25_and_exact_cosine(encoder):
    docs = [
        ("ledger", "postgresql billing ledger"),
        ("ingress", "kubernetes ingress certificate"),
        ("wheels", "python packaging wheels"),
    ]
    queries = {"q1": "billing ledger", "q2": "INGRESS AND certificates?", "q3": "???"}
    runs = raw_runs(docs, queries, encoder)
    assert set(runs) == set(RUNS)
    assert runs["raw_bm25"]["q1"][0] == "ledger"
    # Capitals and punctuation are words to BM25, not query syntax ("AND" is no operator).
    assert runs["raw_bm25"]["q2"][0] == "ingress"
    assert runs["raw_bm25"]["q3"] == []
    for qid in queries:
        # The exact cosine ranks every document; the fusion holds both lists, fused.
        assert sorted(runs["raw_minilm"][qid]) == ["ingress", "ledger", "wheels"]
        assert runs["raw_rrf"][qid] == reciprocal_rank_fusion(runs["raw_bm25"][qid], runs["raw_minilm"][qid])


def test_eval_with_raw_anchors_tests_hybrid_against_their_rrf(tiny_beir: Path, tmp_path: Path, encoder):
    report, details = run_relevance(tiny_beir, tmp_path / "data", encoder=encoder, progress=False, raw_anchors=True)
    assert set(report["baselines"]) == {"naive_rrf", *RUNS}
    assert {"hybrid_vs_naive_rrf", "hybrid_vs_raw_rrf"} <= set(report["significance"])
    test = report["significance"]["hybrid_vs_raw_rrf"]
    hybrid, raw = report["channels"]["hybrid"]["ndcg@10"], report["baselines"]["raw_rrf"]["ndcg@10"]
    assert test["delta"] == pytest.approx(hybrid - raw, abs=1e-3)
    assert set(details["runs"]["raw_rrf"]) == {f"q{i}" for i in range(6)}
    # Every document of the collection shares its topic's words: BM25 alone finds them all.
    assert report["baselines"]["raw_bm25"]["recall@100"] == 1.0
