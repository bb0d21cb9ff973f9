"""An evaluation run end to end on a tiny collection (deterministic test encoder)."""

from __future__ import annotations

import json
from pathlib import Path

from engram.eval.relevance import run_relevance
from engram.eval.report import results_table, write_outputs

#: Hybrid against the channels and fusions, both against the keyword anchors.
PAIRED_TESTS = {
    "hybrid_vs_lexical",
    "hybrid_vs_semantic",
    "hybrid_vs_naive_rrf",
    "hybrid_vs_raw_fts5",
    "lexical_vs_raw_bm25",
    "lexical_vs_raw_fts5",
}


def test_report_shape_and_outputs(tiny_beir: Path, tmp_path: Path, encoder):
    data = tmp_path / "data"
    report, details = run_relevance(tiny_beir, data, encoder=encoder, progress=False)
    assert list(report) == [
        "dataset",
        "docs",
        "queries",
        "channels",
        "baselines",
        "significance",
        "split",
        "context_turns",
        "timings",
    ]
    # The keyword anchors need no model: every run tests hybrid and the lexical channel against them.
    assert set(report["significance"]) == PAIRED_TESTS
    assert set(report["baselines"]) == {"naive_rrf", "raw_bm25", "raw_fts5"}
    assert all(0.0 < t["p"] <= 1.0 for t in report["significance"].values())
    assert report["dataset"] == "tiny" and report["docs"] == 30
    assert report["queries"] == 6  # the unjudged query does not count
    assert list(report["channels"]) == ["lexical", "semantic", "hybrid"]
    for values in report["channels"].values():
        assert set(values) == {"ndcg@10", "recall@100", "mrr@10"}
        assert all(0.0 <= v <= 1.0 for v in values.values())
    assert report["channels"]["lexical"]["recall@100"] == 1.0  # every doc shares its topic's words
    assert details["profiles"]["lexical"]["channels"] == ["lexical"]
    assert details["profiles"]["hybrid"]["channels"] == ["lexical", "semantic"]
    # Naive RRF runs on the same channels, through an RRF profile of its own.
    assert details["profiles"]["naive_rrf"] == {"profile": "eval_naive_rrf", "channels": ["lexical", "semantic"]}
    assert set(report["baselines"]["naive_rrf"]) == {"ndcg@10", "recall@100", "mrr@10"}
    assert set(details["per_query"]["hybrid"]) == {f"q{i}" for i in range(6)}

    out = tmp_path / "out"
    write_outputs(out, report, details)
    assert json.loads((out / "report.json").read_text()) == report
    for name in (
        "per_query.json",
        "report.md",
        "metrics.png",
        "ndcg_delta_hybrid_vs_lexical.png",
        "run.hybrid.trec",
        "run.naive_rrf.trec",
    ):
        assert (out / name).stat().st_size > 0
    assert "| tiny | 30 | 6 |" in results_table([report])

    # A second run reuses the ingested scope: nothing new, same cursor.
    again, _ = run_relevance(tiny_beir, data, encoder=encoder, progress=False, channels=["lexical"])
    assert again["timings"]["ingest"]["ingested"] == 0
    assert again["timings"]["ingest"]["cursor_after"] == report["timings"]["ingest"]["cursor_after"]
    assert again["channels"]["lexical"] == report["channels"]["lexical"]
    assert "categories" not in report and "Per query category" not in (out / "report.md").read_text()


def test_categories_per_channel(tiny_beir: Path, tmp_path: Path, encoder):
    """Queries that carry ``metadata.category`` get a per-category section: each run's
    figures are the means of its own per-query figures over the category's queries."""
    from engram.eval.report import markdown

    queries = [json.loads(line) for line in (tiny_beir / "queries.jsonl").read_text().splitlines()]
    with open(tiny_beir / "queries.jsonl", "w") as f:
        for item in queries:
            if item["_id"] in ("q0", "q1", "q2"):
                item["metadata"] = {"category": "temporal"}
            elif item["_id"] == "q3":
                item["metadata"] = {"category": "single-hop"}
            f.write(json.dumps(item) + "\n")  # q4, q5: no category
    report, details = run_relevance(tiny_beir, tmp_path / "data", encoder=encoder, progress=False)
    sections = report["categories"]
    assert list(sections) == ["single-hop", "temporal"]
    assert sections["temporal"]["queries"] == 3 and sections["single-hop"]["queries"] == 1
    for run in ("lexical", "semantic", "hybrid", "naive_rrf"):
        per_query = details["per_query"][run]
        for metric in ("ndcg@10", "recall@10"):
            expected = round(sum(per_query[q][metric] for q in ("q0", "q1", "q2")) / 3, 4)
            assert sections["temporal"]["runs"][run][metric] == expected
        assert sections["single-hop"]["runs"][run]["ndcg@10"] == round(per_query["q3"]["ndcg@10"], 4)
    assert set(sections["temporal"]["significance"]) == PAIRED_TESTS
    text = markdown(report)
    assert "Per query category" in text and "| temporal | 3 |" in text and "| single-hop | 1 |" in text


def test_the_summary_names_each_refused_document_and_the_rule(tiny_beir: Path, tmp_path: Path, encoder):
    """A document the secret scan refuses is named in the report, with the rule that fired."""
    from engram.eval.report import markdown

    with open(tiny_beir / "corpus.jsonl", "a") as f:
        f.write(json.dumps({"_id": "leak", "title": "deploy notes", "text": "deploy key AKIAIOSFODNN7EXAMPLE"}) + "\n")
    report, _ = run_relevance(tiny_beir, tmp_path / "data", encoder=encoder, progress=False, channels=["lexical"])
    refused = report["timings"]["ingest"]["refused_records"]
    assert refused == [{"id": "leak", "reason": "secret", "detail": "aws-access-key"}]
    assert "- refused `leak`: secret (aws-access-key)" in markdown(report)
