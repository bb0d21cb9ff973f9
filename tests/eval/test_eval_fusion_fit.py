"""Fitting the fusion constants on saved channel hits (engram eval --save-hits, engram fusion-fit)."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.eval.fusion_fit import CollectionHits, QueryHits, default_grid, fit, load_hits, markdown
from engram.eval.relevance import run_relevance
from engram.eval.report import write_outputs
from engram.ranking import HYBRID_PROFILE
from engram.ranking.lexical import LexicalHit
from engram.ranking.semantic import SemanticHit


def test_saved_hits_fuse_to_the_hybrid_run(tiny_beir: Path, tmp_path: Path, encoder):
    """The hits engram eval saves are what fusion saw: fused again offline with the
    profile, they score exactly what the hybrid run through the engine scored."""
    report, details = run_relevance(
        tiny_beir, tmp_path / "data", encoder=encoder, progress=False, channels=["hybrid"], save_hits=True
    )
    write_outputs(tmp_path / "out", report, details)
    assert "hits" not in json.loads((tmp_path / "out" / "per_query.json").read_text())
    hits = load_hits(tmp_path / "out" / "hits.json.gz")
    assert hits.name == "tiny" and set(hits.queries) == set(details["per_query"]["hybrid"])
    assert all(q.lexical and q.semantic for q in hits.queries.values())
    twin = CollectionHits("tiny +ctx2", hits.qrels, hits.queries)  # held out with "tiny"
    out = fit([hits, twin])
    assert out["collections"]["tiny"]["profile"] == pytest.approx(report["channels"]["hybrid"]["ndcg@10"], abs=1e-4)
    assert out["folds"] == []  # one fold only: nothing left to train on when it is held out


def test_saved_hits_carry_the_window_a_query_names(tiny_beir: Path, tmp_path: Path, encoder):
    """A query naming a month boosts the records valid in it after fusion; the saved hits
    carry that window, so fused again offline they still score what the engine scored,
    and without it they would not."""
    rows = [json.loads(line) for line in (tiny_beir / "corpus.jsonl").read_text().splitlines()]
    inside = [i % 12 < 6 for i in range(len(rows))]  # three of each topic's five documents
    for i, row in enumerate(rows):
        row["metadata"] = {"valid_time": "2021-03-10T00:00:00" if inside[i] else "2020-01-01T00:00:00"}
    (tiny_beir / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    judged = [f"q{i % 6}\td{i}\t1\n" for i in range(len(rows)) if not inside[i]]  # only those outside it
    (tiny_beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(judged))
    queries = [json.loads(line) for line in (tiny_beir / "queries.jsonl").read_text().splitlines()]
    (tiny_beir / "queries.jsonl").write_text(
        "".join(json.dumps({**q, "text": q["text"] + " in March 2021"}) + "\n" for q in queries)
    )
    report, details = run_relevance(
        tiny_beir, tmp_path / "data", encoder=encoder, progress=False, channels=["hybrid"], save_hits=True
    )
    write_outputs(tmp_path / "out", report, details)
    hits = load_hits(tmp_path / "out" / "hits.json.gz")
    assert all(q.window is not None for q in hits.queries.values())
    hybrid = report["channels"]["hybrid"]["ndcg@10"]
    assert fit([hits])["collections"]["tiny"]["profile"] == pytest.approx(hybrid, abs=1e-4)
    undated = CollectionHits(
        "tiny", hits.qrels, {q: dataclasses.replace(h, window=None) for q, h in hits.queries.items()}
    )
    assert fit([undated])["collections"]["tiny"]["profile"] > hybrid + 0.01


def _collection(name: str, lexical_right: bool, n: int = 12) -> CollectionHits:
    """Each query has one relevant record that only one channel finds, and a decoy the
    other channel ranks first and the right channel second. Lexical-right: the relevant
    record wins only at a lexical weight above about 0.78; semantic-right: only below
    about 0.36 (the profile's 0.65 fails both)."""
    queries, qrels = {}, {}
    for q in range(n):
        rel, decoy = f"{name}-rel{q}", f"{name}-decoy{q}"
        fillers_lex = [LexicalHit(f"{name}-l{q}-{i}", 6.0 - 0.1 * i, 0) for i in range(40)]
        fillers_sem = [SemanticHit(f"{name}-s{q}-{i}", 0.6 - 0.005 * i, 0) for i in range(40)]  # floor 0.405
        if lexical_right:
            lexical = [LexicalHit(rel, 10.0, 0), LexicalHit(decoy, 6.5, 0), *fillers_lex]
            semantic = [SemanticHit(decoy, 0.8, 0), *fillers_sem]
            similarity = {rel: 0.3}
        else:
            lexical = [LexicalHit(decoy, 10.0, 0), *fillers_lex]
            semantic = sorted(
                [SemanticHit(rel, 0.8, 0), SemanticHit(decoy, 0.5235, 0), *fillers_sem], key=lambda h: -h.similarity
            )
            similarity = {}
        queries[f"q{q}"] = QueryHits(lexical, semantic, similarity)
        qrels[f"q{q}"] = {rel: 1}
    return CollectionHits(name, qrels, queries)


def test_fit_follows_the_channel_that_is_right(tmp_path: Path):
    lexical_world = [_collection("a", True), _collection("b", True), _collection("c", True)]
    out = fit(lexical_world, step=0.1)
    assert [f["held_out"] for f in out["folds"]] == ["a", "b", "c"]
    assert all(f["lexical_norm_power"] in default_grid(HYBRID_PROFILE.config.fusion).powers for f in out["folds"])
    for c in out["collections"].values():  # every fold learns to trust lexical
        assert c["held_out"] == 1.0 and c["profile"] < 1.0
    semantic_world = fit([_collection("d", False), _collection("e", False)], step=0.1)
    for c in semantic_world["collections"].values():  # and here semantic
        assert c["held_out"] == 1.0 and c["best_fixed_weight"] == 0.35 and c["profile"] < 1.0
    assert "| a | " in markdown(out)

    # the weight alone (power held at 1, where the thresholds of _collection hold)
    fusion = HYBRID_PROFILE.config.fusion
    assert fusion is not None
    linear = dataclasses.replace(HYBRID_PROFILE.config, fusion=dataclasses.replace(fusion, lexical_norm_power=1.0))
    weight_only = dataclasses.replace(default_grid(fusion), powers=(1.0,))
    for c in fit(lexical_world, config=linear, step=0.1, grid=weight_only)["collections"].values():
        assert c["held_out"] == 1.0 and c["best_fixed_weight"] == 0.85 and c["profile"] < 1.0

    # the command line: hits files in, fit.json and fit.md out
    files = []
    for c in lexical_world:
        path = tmp_path / f"{c.name}.json.gz"
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            json.dump(
                {
                    "collection": c.name,
                    "qrels": c.qrels,
                    "queries": {
                        q: {
                            "lexical": [[h.record_id, h.score, h.valid_time_ms] for h in v.lexical],
                            "semantic": [[h.record_id, h.similarity, h.valid_time_ms] for h in v.semantic],
                            "similarity": {},
                        }
                        for q, v in c.queries.items()
                    },
                },
                handle,
            )
        files += ["--hits", str(path)]
    from engram.service.cli import app

    result = CliRunner().invoke(app, ["fusion-fit", *files, "--step", "0.1", "--out", str(tmp_path / "fit")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "fit" / "fit.json").read_text())["folds"] == out["folds"]
    missing = CliRunner().invoke(app, ["fusion-fit", "--hits", str(tmp_path / "nope.json.gz")])
    assert missing.exit_code == 2
