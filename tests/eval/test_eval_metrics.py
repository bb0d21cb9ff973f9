"""Metrics against hand-computed values, and the qrels loader."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from eval.metrics import evaluate, load_qrels, mean_metrics


def test_ndcg_recall_mrr_hand_computed():
    qrels = {"q1": {"d1": 2, "d2": 1}, "q2": {"x": 1}}
    result = evaluate(qrels, {"q1": ["d3", "d1", "d2"]})
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert result["q1"]["ndcg@10"] == pytest.approx(dcg / idcg)  # 0.66967
    assert result["q1"]["recall@100"] == 1.0
    assert result["q1"]["mrr@10"] == 0.5
    assert result["q2"] == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}  # judged, no run
    assert mean_metrics(result)["mrr@10"] == 0.25


def test_cutoffs():
    ranking = [f"n{i}" for i in range(10)] + ["rel"]  # the relevant doc at rank 11
    result = evaluate({"q": {"rel": 1, "other": 1}}, {"q": ranking})["q"]
    assert result["ndcg@10"] == 0.0 and result["mrr@10"] == 0.0
    assert result["recall@100"] == 0.5


def test_run_order_is_kept_even_with_docid_ties():
    # Rank order, not docid order, decides: "b" first must count as rank 1.
    result = evaluate({"q": {"b": 1}}, {"q": ["b", "a", "c"]})["q"]
    assert result["mrr@10"] == 1.0 and result["ndcg@10"] == 1.0


def test_qrels_loader_drops_non_positive_grades(tmp_path: Path):
    path = tmp_path / "q.tsv"
    path.write_text("query-id\tcorpus-id\tscore\n1\ta\t4\n1\tb\t-1\n2\tc\t0\n")
    assert load_qrels(path) == {"1": {"a": 4}}
