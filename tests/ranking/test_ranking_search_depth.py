"""Search depth (ef) grows with the index: the profile's rule, and the index applying it
to each scope as the scope grows."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engram.ranking.profiles import HYBRID_PROFILE, SemanticConfig
from engram.ranking.semantic import SemanticIndex


def test_the_depth_is_the_base_up_to_the_reference_size_then_grows_with_it():
    config = SemanticConfig(expansion_search=64, expansion_reference=100, expansion_growth=1.0)
    assert [config.expansion_for(n) for n in (0, 1, 100)] == [64, 64, 64]
    assert config.expansion_for(200) == 128 and config.expansion_for(1_000) == 640
    shipped = HYBRID_PROFILE.config.semantic
    assert shipped is not None
    depths = [shipped.expansion_for(n) for n in (10_000, 100_000, 300_000, 1_000_000, 3_000_000)]
    assert depths == sorted(depths) and depths[0] == shipped.expansion_search < depths[-1]


def test_a_scope_is_searched_at_the_depth_its_size_calls_for(tmp_path: Path):
    config = SemanticConfig(
        expansion_search=16,
        expansion_reference=20,
        expansion_growth=1.0,
        exact_up_to=0,
        rescore_factor=1,
        rescore_min=0,
    )
    rng = np.random.default_rng(3)
    v = rng.normal(size=(80, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    index = SemanticIndex(tmp_path / "semantic", 8, graph=config)
    index.apply("small", upserts=[(f"r{i}", i, v[i : i + 1]) for i in range(10)], removals=[], through_cursor=10)
    index.apply("large", upserts=[(f"r{i}", i, v[i : i + 1]) for i in range(80)], removals=[], through_cursor=80)
    for scope, live in (("small", 10), ("large", 80)):
        hits = index.search(scope, v[0], 3)
        assert hits[0].record_id == "r0"
        assert index._scope(scope).index.expansion_search == config.expansion_for(live)  # noqa: SLF001
    assert config.expansion_for(10) == 16 and config.expansion_for(80) == 64
    index.apply(
        "small", upserts=[(f"s{i}", 10 + i, v[10 + i : 11 + i]) for i in range(50)], removals=[], through_cursor=60
    )
    index.search("small", v[0], 3)
    assert index._scope("small").index.expansion_search == config.expansion_for(60) == 48  # noqa: SLF001
