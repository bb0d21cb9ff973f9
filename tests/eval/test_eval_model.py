"""One end-to-end relevance run with the real model, on ADI (82 documents)."""

from __future__ import annotations

from pathlib import Path

import pytest

ADI = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "adi"  # ../shared beside the repo


@pytest.mark.model
@pytest.mark.skipif(not (ADI / "corpus.jsonl").exists(), reason="ADI collection not present")
def test_adi_with_minilm(tmp_path: Path):
    from engram.eval.relevance import run_relevance

    report, details = run_relevance(ADI, tmp_path / "data", progress=False)
    assert report["docs"] == 82 and report["queries"] == 35
    channels = report["channels"]
    # Floors well under the measured values (lexical 0.478, semantic 0.498, hybrid 0.517).
    assert channels["lexical"]["ndcg@10"] > 0.40
    assert channels["semantic"]["ndcg@10"] > 0.42
    assert channels["hybrid"]["ndcg@10"] > 0.45
    assert channels["hybrid"]["ndcg@10"] >= channels["lexical"]["ndcg@10"] - 0.02
