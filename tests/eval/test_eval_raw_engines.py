"""The raw engines alone (the data READMEs' anchors), run query by query."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.eval.fts5_peer import fts5_search, relaxed_expression, strict_expression
from engram.eval.raw_engines import KEYWORD_RUNS, RUNS, raw_runs, reciprocal_rank_fusion
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


def test_fts5_peer_requires_every_word_as_a_prefix_before_any_word():
    docs = [
        ("both", "the support group met on tuesday"),
        ("one", "group group group group"),
        ("prefix", "a supporting role in the groups"),
        ("none", "kubernetes ingress certificates"),
    ]
    search = fts5_search(docs, 10)
    # Every word required, each as a prefix: "groups" and "supporting" match too.
    assert strict_expression("support group?") == "support* AND group*"
    assert sorted(search("support group?")) == ["both", "prefix"]
    # Nothing holds every word: any content word, stop words ("did", "the") dropped.
    assert relaxed_expression("Did the group meet in March?") == "group* OR meet* OR march*"
    assert set(search("Did the group meet in March?")) == {"both", "one", "prefix"}
    # BM25 ranks the document holding the word four times above those holding it once.
    assert search("Did the group meet in March?")[0] == "one"
    # No fallback for a question holding a number, or of fewer than three words.
    assert relaxed_expression("Did the group meet in 2023?") is None
    assert search("Did the group meet in 2023?") == []
    assert search("group meeting") == []
    # An apostrophe makes the question one quoted phrase; the fallback keeps the word whole.
    assert strict_expression("What is Caroline's group?") == '"What is Caroline\'s group"*'
    assert relaxed_expression("What is Caroline's group?") == '"caroline\'s"* OR group*'
    # Capitalised operators are FTS5 syntax to the peer; a malformed expression finds nothing.
    assert strict_expression("ingress AND certificates?") == 'ingress AND "certificates?"'
    assert search("ingress AND certificates?") == ["none"]
    assert search("ingress AND") == []


def test_keyword_anchors_run_without_the_model():
    runs = raw_runs([("a", "billing ledger"), ("b", "ingress certificate")], {"q": "billing ledger"})
    assert set(runs) == set(KEYWORD_RUNS)
    assert runs["raw_fts5"]["q"] == ["a"] and runs["raw_bm25"]["q"] == ["a"]
