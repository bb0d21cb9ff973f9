"""A small scope's semantic search scores every code and rescores the best exactly, so
it finds the nearest records a walk of its graph misses; past
``SemanticConfig.exact_up_to`` live passages it walks the HNSW graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engram.ranking.profiles import SemanticConfig, VectorStorage
from engram.ranking.semantic import SemanticIndex

# A deliberately poor graph (few links, shallow build and search, no candidates beyond
# those asked for to rescore), float32 vectors.
POOR_GRAPH = dict(
    connectivity=4, expansion_add=8, expansion_search=8, storage=VectorStorage.F32, rescore_factor=1, rescore_min=0
)


def _vectors(n: int, dim: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _top(hits) -> list[str]:  # noqa: ANN001
    return [h.record_id for h in hits]


def test_a_small_scope_finds_the_true_nearest_records_where_its_graph_misses(tmp_path: Path):
    vectors, queries = _vectors(3000, 16, 1), _vectors(20, 16, 2)
    passages = [(f"r{i}", i, vectors[i : i + 1]) for i in range(len(vectors))]
    scanned = SemanticIndex(tmp_path / "scan", 16, graph=SemanticConfig(**POOR_GRAPH, exact_up_to=3000))
    walked = SemanticIndex(tmp_path / "graph", 16, graph=SemanticConfig(**POOR_GRAPH, exact_up_to=2999))
    for index in (scanned, walked):
        index.apply("s", upserts=passages, removals=[], through_cursor=1)
    graph_misses = 0
    for query in queries:
        similarities = vectors @ query
        truth = np.argsort(-similarities, kind="stable")[:10]
        hits = scanned.search("s", query, 10)
        assert {h.record_id for h in hits} == {f"r{i}" for i in truth}
        assert np.allclose([h.similarity for h in hits], similarities[truth], atol=1e-5)
        graph_misses += set(_top(walked.search("s", query, 10))) != set(_top(hits))
    assert graph_misses > 0  # the same graph, walked, misses some: the scan is what finds them


def test_a_scope_that_grows_past_the_threshold_is_then_searched_through_its_graph(tmp_path: Path):
    config = SemanticConfig(expansion_search=16, exact_up_to=60, rescore_factor=1, rescore_min=0)
    vectors = _vectors(100, 8, 3)
    index = SemanticIndex(tmp_path, 8, graph=config)
    index.apply("s", upserts=[(f"r{i}", i, vectors[i : i + 1]) for i in range(60)], removals=[], through_cursor=1)
    assert _top(index.search("s", vectors[5], 3))[0] == "r5"
    graph = index._scope("s").index  # noqa: SLF001 - the usearch index, to read its search depth
    assert graph.expansion_search == config.expansion_search  # scanned: no graph depth was set
    index.apply("s", upserts=[(f"r{i}", i, vectors[i : i + 1]) for i in range(60, 100)], removals=[], through_cursor=2)
    assert _top(index.search("s", vectors[70], 3))[0] == "r70"
    # walked, at the depth this size and k ask for (k = 3 + 16 > the configured 16)
    assert index._scope("s").index.expansion_search == max(config.expansion_for(100), 3 + 16)  # noqa: SLF001
    index.apply(
        "s", upserts=[], removals=[f"r{i}" for i in range(50)], through_cursor=3
    )  # back to 50 live: scanned again
    hits = index.search("s", vectors[55], 50)
    assert len(hits) == 50 and {h.record_id for h in hits} == {f"r{i}" for i in range(50, 100)}


def test_a_scan_reads_from_disk_only_the_rows_it_rescores(tmp_path: Path, monkeypatch):
    """The scan scores the codes in memory: of the rows on disk it reads only the
    candidates it rescores, and still finds the true nearest records."""
    from engram.ranking.vector_rows import VectorRows

    config = SemanticConfig(storage=VectorStorage.F32, exact_up_to=3000, rescore_factor=2, rescore_min=0)
    vectors, queries = _vectors(3000, 16, 4), _vectors(5, 16, 5)
    index = SemanticIndex(tmp_path, 16, graph=config)
    index.apply("s", upserts=[(f"r{i}", i, vectors[i : i + 1]) for i in range(3000)], removals=[], through_cursor=1)
    read = []
    real_read = VectorRows.read
    monkeypatch.setattr(VectorRows, "read", lambda self, labels: read.append(len(labels)) or real_read(self, labels))
    for query in queries:
        hits = index.search("s", query, 10)
        truth = np.argsort(-(vectors @ query), kind="stable")[:10]
        assert [h.record_id for h in hits] == [f"r{i}" for i in truth]
    # one passage a record: a search for 10 records asks for 10 + 16 passages
    assert read == [config.rescore_for(10 + 16)] * len(queries)
