"""Metrics against hand-computed values, and the qrels loader."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engram.eval.metrics import evaluate, load_qrels, mean_metrics


def test_ndcg_recall_mrr_hand_computed():
    qrels = {"q1": {"d1": 2, "d2": 1}, "q2": {"x": 1}}
    result = evaluate(qrels, {"q1": ["d3", "d1", "d2"]})
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert result["q1"]["ndcg@10"] == pytest.approx(dcg / idcg)  # 0.66967
    assert result["q1"]["recall@100"] == 1.0
    assert result["q1"]["mrr@10"] == 0.5
    assert result["q1"]["recall@10"] == 1.0
    assert result["q2"] == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0, "recall@10": 0.0}  # judged, no run
    assert mean_metrics(result)["mrr@10"] == 0.25


def test_cutoffs():
    ranking = [f"n{i}" for i in range(10)] + ["rel"]  # the relevant doc at rank 11
    result = evaluate({"q": {"rel": 1, "other": 1}}, {"q": ranking})["q"]
    assert result["ndcg@10"] == 0.0 and result["mrr@10"] == 0.0
    assert result["recall@100"] == 0.5 and result["recall@10"] == 0.0


def test_run_order_is_kept_even_with_docid_ties():
    # Rank order, not docid order, decides: "b" first must count as rank 1.
    result = evaluate({"q": {"b": 1}}, {"q": ["b", "a", "c"]})["q"]
    assert result["mrr@10"] == 1.0 and result["ndcg@10"] == 1.0


def test_qrels_loader_drops_non_positive_grades(tmp_path: Path):
    path = tmp_path / "q.tsv"
    path.write_text("query-id\tcorpus-id\tscore\n1\ta\t4\n1\tb\t-1\n2\tc\t0\n")
    assert load_qrels(path) == {"1": {"a": 4}}


def test_paired_randomization_separates_a_real_gain_from_noise():
    from engram.eval.metrics import paired_randomization

    better = paired_randomization([0.9] * 30, [0.1] * 30)
    assert better["delta"] == 0.8 and better["p"] < 0.001
    noise = paired_randomization([0.5, 0.6, 0.4, 0.55] * 5, [0.55, 0.4, 0.6, 0.5] * 5)
    assert noise["p"] > 0.5
    assert paired_randomization([0.3, 0.7], [0.2, 0.1]) == paired_randomization([0.3, 0.7], [0.2, 0.1])


def test_trec_run_keeps_every_rank():
    from engram.eval.report import trec_run

    text = trec_run({"q2": ["d9"], "q1": [f"d{i}" for i in range(150)]}, "engram-hybrid")
    lines = text.splitlines()
    assert len(lines) == 151 and lines[0] == "q1 Q0 d0 1 150 engram-hybrid"
    assert lines[149] == "q1 Q0 d149 150 1 engram-hybrid" and lines[150] == "q2 Q0 d9 1 1 engram-hybrid"


def test_by_category_hand_computed():
    from engram.eval.metrics import by_category

    # Three queries, two categories; "q9" has no category and counts in none.
    qrels = {"a1": {"x": 1, "y": 1}, "a2": {"z": 1}, "b1": {"w": 1}, "q9": {"v": 1}}
    hybrid = evaluate(qrels, {"a1": ["x"], "a2": [f"n{i}" for i in range(10)] + ["z"], "b1": ["w"], "q9": ["v"]})
    lexical = evaluate(qrels, {"a1": ["x", "y"], "a2": ["z"], "b1": ["n", "w"], "q9": []})
    categories = {"a1": "temporal", "a2": "temporal", "b1": "multi-hop"}
    sections = by_category({"hybrid": hybrid, "lexical": lexical}, categories, paired=("lexical", "semantic"))
    assert list(sections) == ["multi-hop", "temporal"]  # name order
    temporal = sections["temporal"]
    assert temporal["queries"] == 2
    # a1: x alone of {x, y}: recall 1/2, nDCG 1/(1 + 1/log2 3); a2: z at rank 11: 0 and 0.
    ndcg_a1 = 1 / (1 + 1 / math.log2(3))
    assert temporal["runs"]["hybrid"] == {"ndcg@10": round(ndcg_a1 / 2, 4), "recall@10": 0.25}
    assert temporal["runs"]["lexical"] == {"ndcg@10": 1.0, "recall@10": 1.0}
    multi = sections["multi-hop"]
    assert multi["queries"] == 1
    assert multi["runs"]["lexical"] == {"ndcg@10": round(1 / math.log2(3), 4), "recall@10": 1.0}
    # the paired test covers the category's queries only, against the runs present
    assert set(temporal["significance"]) == {"hybrid_vs_lexical"}
    assert temporal["significance"]["hybrid_vs_lexical"]["delta"] == round(ndcg_a1 / 2 - 1.0, 4)
    assert multi["significance"]["hybrid_vs_lexical"]["delta"] == round(1 - 1 / math.log2(3), 4)
    assert by_category({"hybrid": hybrid}, {}) == {}
