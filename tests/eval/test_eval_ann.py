"""`engram bench-ann`: both engines built over the same vectors, measured in one run."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from engram.service.cli import app


def test_bench_ann_measures_both_engines_on_the_same_synthetic_and_real_vectors(tmp_path):
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(5, 32)).astype(np.float32)
    vectors = centres[rng.integers(0, 5, 400)] + 0.3 * rng.normal(size=(400, 32)).astype(np.float32)
    queries = centres[rng.integers(0, 5, 12)] + 0.3 * rng.normal(size=(12, 32)).astype(np.float32)
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    real = tmp_path / "tiny.npz"
    np.savez(real, vectors=unit(vectors), query_vectors=unit(queries))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "bench-ann",
            "--sizes",
            "1500",
            "--real",
            str(real),
            "--m",
            "8",
            "--ef",
            "16,64",
            "--dtypes",
            "f32,f16",
            "--queries",
            "20",
            "--threads",
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "ann.json").read_text())
    seen = {(r["set"], r["engine"], r["dtype"], r["ef"]) for r in rows}
    assert seen == {
        (s, e, d, ef)
        for s in ("real", "synthetic-1500")
        for e, d in (("hnswlib", "f32"), ("usearch", "f32"), ("usearch", "f16"))
        for ef in (16, 64)
    }
    for r in rows:
        assert 0.0 <= r["recall@10"] <= 1.0 and r["disk_mb"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0
        assert r["n"] == (400 if r["set"] == "real" else 1500)
    # On a small clustered set a graph searched at ef 64 finds nearly all true neighbours.
    assert min(r["recall@10"] for r in rows if r["ef"] == 64) > 0.9
    f16 = next(r for r in rows if r["set"] == "synthetic-1500" and r["dtype"] == "f16")
    f32 = next(r for r in rows if r["set"] == "synthetic-1500" and r["engine"] == "usearch" and r["dtype"] == "f32")
    assert f16["disk_mb"] < f32["disk_mb"]  # half-width storage is smaller on disk
    assert "| real | 400 | hnswlib |" in (out / "ann.md").read_text()
