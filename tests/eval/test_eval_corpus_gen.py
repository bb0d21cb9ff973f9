"""The capacity corpus is low-rank, Zipfian and deterministic."""

from __future__ import annotations

from collections import Counter

import numpy as np

from engram.eval.corpus_gen import CorpusSpec, SyntheticCorpus


def test_vectors_are_low_rank_and_unit():
    spec = CorpusSpec(size=3000, dim=64, topics=12, vocab_size=2000)
    corpus = SyntheticCorpus(spec)
    vectors = np.vstack([v for _, v in corpus.chunks(1000)])
    assert vectors.shape == (3000, 64)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    singular = np.linalg.svd(vectors, compute_uv=False) ** 2
    assert singular[:12].sum() / singular.sum() > 0.8  # the topics carry most of the variance
    # An isotropic sample of the same shape would spread it evenly (12/64 ~ 0.19).
    isotropic = np.random.default_rng(0).standard_normal((3000, 64))
    iso = np.linalg.svd(isotropic, compute_uv=False) ** 2
    assert iso[:12].sum() / iso.sum() < 0.3


def test_text_is_zipfian_and_deterministic():
    spec = CorpusSpec(size=500, dim=16, topics=5, vocab_size=3000)
    a = list(SyntheticCorpus(spec).records(200))
    b = list(SyntheticCorpus(spec).records(200))
    assert [r.text for r in a] == [r.text for r in b]
    assert len({r.external_id for r in a}) == 500
    counts = Counter(w for r in a for w in r.text.split())
    freqs = sorted(counts.values(), reverse=True)
    assert freqs[0] > 10 * freqs[100]  # a heavy head, a long tail
    texts, qv = SyntheticCorpus(spec).queries(4)
    assert len(texts) == 4 and qv.shape == (4, 16)


def test_written_vectors_are_the_chunks_vectors(tmp_path):
    """write_vectors skips making the texts; every row must still be the vector the
    records' chunks carry (the ingest pairs them by position), the last chunk short."""
    corpus = SyntheticCorpus(CorpusSpec(size=2500, dim=32, topics=8, vocab_size=1500))
    written = corpus.write_vectors(str(tmp_path / "v.npy"), chunk=1000, dtype=np.float32)
    assert np.array_equal(written, np.vstack([v for _, v in corpus.chunks(1000)]))
