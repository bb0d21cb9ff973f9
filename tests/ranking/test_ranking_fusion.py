"""Fusion as a pure function: membership, ties, recency and channel weighting."""

from __future__ import annotations

import json
import math

import pytest

from ranking import HYBRID_PROFILE, LEXICAL_PROFILE, Profile, fuse, recency
from ranking.lexical import LexicalHit
from ranking.semantic import SemanticHit

DAY = 24 * 3600 * 1000


def lex(*pairs: tuple[str, float], t: int = 0) -> list[LexicalHit]:
    return [LexicalHit(r, s, t) for r, s in pairs]


def sem(*pairs: tuple[str, float], t: int = 0) -> list[SemanticHit]:
    return [SemanticHit(r, s, t) for r, s in pairs]


def test_recency_half_life_and_future():
    half = HYBRID_PROFILE.config["recency_half_life_ms"]
    assert recency(0, 0, half) == 1.0
    assert recency(0, 30 * DAY, half) == pytest.approx(0.5)
    assert recency(0, 60 * DAY, half) == pytest.approx(0.25)
    assert recency(10 * DAY, 0, half) == 1.0  # valid from the future: age 0


def test_lexical_profile_blend():
    out = fuse(lex(("a", 4.0), ("b", 2.0)), None, {}, LEXICAL_PROFILE.config, 30 * DAY)
    assert [c.record_id for c in out] == ["a", "b"]
    assert out[0].final_score == pytest.approx(0.85 * 1.0 + 0.15 * 0.5)
    assert out[1].final_score == pytest.approx(0.85 * 0.5 + 0.15 * 0.5)


@pytest.mark.parametrize("method", ["adaptive_convex", "rrf"])
def test_keyword_only_hits_are_never_dropped(method: str):
    config = {**HYBRID_PROFILE.config, "fusion": {**HYBRID_PROFILE.config["fusion"], "method": method}}
    lexical = lex(("code", 9.0), ("k2", 1.0))
    semantic = sem(*[(f"s{i}", 0.8 - i * 0.01) for i in range(50)])
    out = fuse(lexical, semantic, {"k2": 0.1}, config, 0)
    ids = {c.record_id for c in out}
    assert {"code", "k2"} <= ids and len(ids) == 52


def test_ties_break_by_recency_then_record_id():
    lexical = [LexicalHit("b", 1.0, 0), LexicalHit("a", 1.0, 0), LexicalHit("c", 1.0, 5 * DAY)]
    out = fuse(lexical, None, {}, {**LEXICAL_PROFILE.config, "recency_weight": 0.0}, 5 * DAY)
    assert [c.record_id for c in out] == ["c", "a", "b"]


def test_identifier_spike_outranks_flat_semantic():
    """A code matched by one record must lead even when every cosine says otherwise."""
    lexical = lex(("exact", 12.0), ("partial", 2.0), ("partial2", 1.9), ("partial3", 1.8))
    semantic = sem(*[(f"s{i}", 0.42 - i * 0.001) for i in range(100)])
    sims = {"exact": 0.30, "partial": 0.31, "partial2": 0.30, "partial3": 0.30}
    out = fuse(lexical, semantic, sims, HYBRID_PROFILE.config, 0)
    assert out[0].record_id == "exact"


def test_paraphrase_semantic_spike_outranks_weak_lexical():
    lexical = lex(*[(f"l{i}", 2.0 - i * 0.01) for i in range(30)])
    semantic = sem(("para", 0.82), *[(f"s{i}", 0.35 - i * 0.001) for i in range(100)])
    sims = {f"l{i}": 0.3 for i in range(30)}
    out = fuse(lexical, semantic, sims, HYBRID_PROFILE.config, 0)
    assert out[0].record_id == "para"


def test_contribution_as_dict_is_json_stable():
    out = fuse(lex(("a", 1.23456789)), sem(("a", 0.5), ("b", 0.4)), {"a": 0.5}, HYBRID_PROFILE.config, 0)
    first = json.dumps([c.as_dict() for c in out], sort_keys=True)
    again = fuse(lex(("a", 1.23456789)), sem(("a", 0.5), ("b", 0.4)), {"a": 0.5}, HYBRID_PROFILE.config, 0)
    assert json.dumps([c.as_dict() for c in again], sort_keys=True) == first
    assert out[0].as_dict()["lexical_score"] == 1.234568
    assert all(not isinstance(v, float) or math.isfinite(v) for c in out for v in c.as_dict().values())


def test_empty_inputs():
    assert fuse([], [], {}, HYBRID_PROFILE.config, 0) == []
    assert fuse([], None, {}, LEXICAL_PROFILE.config, 0) == []


def test_profile_digest_is_canonical_and_pinned():
    assert LEXICAL_PROFILE.config_digest().startswith("sha256:")
    same = Profile(name="lexical", version="1", config=dict(reversed(list(LEXICAL_PROFILE.config.items()))))
    assert same.config_digest() == LEXICAL_PROFILE.config_digest()
    assert HYBRID_PROFILE.config_digest() != LEXICAL_PROFILE.config_digest()
    with pytest.raises(TypeError):
        LEXICAL_PROFILE.config["lexical_cap"] = 1  # type: ignore[index]
