"""Fusion as a pure function: membership, ties, recency and channel weighting."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ranking_support import doc

from engram.models.outputs import ChannelContribution, contribution_wire
from engram.ranking import HYBRID_PROFILE, LEXICAL_PROFILE, Profile, Ranker, fuse, recency
from engram.ranking.lexical import LexicalHit
from engram.ranking.profiles import FieldWeights, FusionMethod, ProfileConfig, RecencyBlend
from engram.ranking.semantic import SemanticHit

DAY = 24 * 3600 * 1000


def wire(c: Any) -> dict[str, Any]:
    """The receipt's wire form of a contribution."""
    return contribution_wire(c, c.decimals)


def lex(*pairs: tuple[str, float], t: int = 0) -> list[LexicalHit]:
    return [LexicalHit(r, s, t) for r, s in pairs]


def sem(*pairs: tuple[str, float], t: int = 0) -> list[SemanticHit]:
    return [SemanticHit(r, s, t) for r, s in pairs]


def test_recency_half_life_and_future():
    half = HYBRID_PROFILE.config.recency.half_life_ms
    assert recency(0, 0, half) == 1.0
    assert recency(0, 30 * DAY, half) == pytest.approx(0.5)
    assert recency(0, 60 * DAY, half) == pytest.approx(0.25)
    assert recency(10 * DAY, 0, half) == 1.0  # valid from the future: age 0


def test_lexical_profile_blend():
    out = fuse(lex(("a", 4.0), ("b", 2.0)), None, {}, LEXICAL_PROFILE.config, 30 * DAY)
    assert [c.record_id for c in out] == ["a", "b"]
    assert out[0].final_score == pytest.approx(0.85 * 1.0 + 0.15 * 0.5)
    assert out[1].final_score == pytest.approx(0.85 * 0.5 + 0.15 * 0.5)


@pytest.mark.parametrize("method", list(FusionMethod))
def test_keyword_only_hits_are_never_dropped(method: FusionMethod):
    base = HYBRID_PROFILE.config
    assert base.fusion is not None
    config = dataclasses.replace(base, fusion=dataclasses.replace(base.fusion, method=method))
    lexical = lex(("code", 9.0), ("k2", 1.0))
    semantic = sem(*[(f"s{i}", 0.8 - i * 0.01) for i in range(50)])
    out = fuse(lexical, semantic, {"k2": 0.1}, config, 0)
    ids = {c.record_id for c in out}
    assert {"code", "k2"} <= ids and len(ids) == 52


def test_ties_break_by_recency_then_record_id():
    lexical = [LexicalHit("b", 1.0, 0), LexicalHit("a", 1.0, 0), LexicalHit("c", 1.0, 5 * DAY)]
    no_recency = dataclasses.replace(LEXICAL_PROFILE.config, recency=RecencyBlend(recency_weight=0.0))
    out = fuse(lexical, None, {}, no_recency, 5 * DAY)
    assert [c.record_id for c in out] == ["c", "a", "b"]


@pytest.mark.parametrize("method", list(FusionMethod))
def test_equal_channel_scores_get_equal_fused_scores_in_any_order(method: FusionMethod):
    """Two records with the same evidence in both channels score the same, whichever the
    engines listed first (their order among equal scores is insertion order, and record
    ids are random): ranks are shared by equal scores, so the rank term cannot split them."""
    base = HYBRID_PROFILE.config
    assert base.fusion is not None
    config = dataclasses.replace(base, fusion=dataclasses.replace(base.fusion, method=method))
    tail = [(f"s{i}", 0.5 - i * 0.01) for i in range(20)]
    sims = {"x": 0.1, "y": 0.1}
    first = fuse(lex(("top", 9.0), ("x", 3.0), ("y", 3.0), ("z", 1.0)), sem(*tail), sims, config, 0)
    swapped = fuse(lex(("top", 9.0), ("y", 3.0), ("x", 3.0), ("z", 1.0)), sem(*tail), sims, config, 0)
    for out in (first, swapped):
        by_id = {c.record_id: c for c in out}
        assert by_id["x"].fused_score == by_id["y"].fused_score
        assert by_id["x"].lexical_rank == by_id["y"].lexical_rank == 2 and by_id["z"].lexical_rank == 4
    assert [wire(c) for c in first] == [wire(c) for c in swapped]


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


def test_receipt_lexical_weight_recomputes_the_fused_score():
    """The query's lexical weight rides on every contribution: with it and the profile's
    constants, each fused score can be recomputed from the receipt alone."""
    fusion = HYBRID_PROFILE.config.fusion
    assert fusion is not None and fusion.method is FusionMethod.ADAPTIVE_CONVEX
    lexical = lex(("a", 4.0), ("b", 2.0))
    semantic = sem(("a", 0.8), *[(f"s{i}", 0.6 - i * 0.01) for i in range(20)])
    floor = semantic[-1].similarity
    out = {c.record_id: c for c in fuse(lexical, semantic, {"b": floor}, HYBRID_PROFILE.config, 0)}
    weights = {c.lexical_weight for c in out.values()}
    assert len(weights) == 1
    w = weights.pop()
    assert w is not None and fusion.min_lexical_weight <= w <= fusion.max_lexical_weight
    k, blend, power = fusion.rrf_k, fusion.rank_blend, fusion.lexical_norm_power
    # "b": half the best BM25, lexical rank 2, cosine at the floor (semantic norm 0)
    expected = (1 - blend) * (w * 0.5**power) + blend * w * (k + 1) / (k + 2)
    assert out["b"].fused_score == pytest.approx(expected)
    assert wire(out["b"])["lexical_weight"] == round(w, 6)
    assert all(c.lexical_weight is None for c in fuse(lexical, None, {}, LEXICAL_PROFILE.config, 0))


def test_contribution_as_dict_is_json_stable():
    out = fuse(lex(("a", 1.23456789)), sem(("a", 0.5), ("b", 0.4)), {"a": 0.5}, HYBRID_PROFILE.config, 0)
    first = json.dumps([wire(c) for c in out], sort_keys=True)
    again = fuse(lex(("a", 1.23456789)), sem(("a", 0.5), ("b", 0.4)), {"a": 0.5}, HYBRID_PROFILE.config, 0)
    assert json.dumps([wire(c) for c in again], sort_keys=True) == first
    assert wire(out[0])["lexical_score"] == 1.234568
    assert all(not isinstance(v, float) or math.isfinite(v) for c in out for v in wire(c).values())
    for c in out:  # the wire form is the contract's ChannelContribution, field for field
        as_record = {**wire(c), "record_id": "mem_" + c.record_id}  # ids here are short labels
        assert ChannelContribution.model_validate(as_record).model_dump() == as_record


def test_empty_inputs():
    assert fuse([], [], {}, HYBRID_PROFILE.config, 0) == []
    assert fuse([], None, {}, LEXICAL_PROFILE.config, 0) == []


def test_profile_digest_is_canonical_and_pinned():
    import rfc8785

    assert LEXICAL_PROFILE.config_digest().startswith("sha256:")
    plain = LEXICAL_PROFILE.config.as_dict()
    expected = "sha256:" + hashlib.sha256(rfc8785.dumps(dict(reversed(list(plain.items()))))).hexdigest()
    assert LEXICAL_PROFILE.config_digest() == expected  # JCS of the whole config, key order free
    assert plain["channels"] == ["lexical"] and plain["lexical"]["field_weights"]["primary"] == 3.0
    assert HYBRID_PROFILE.config_digest() != LEXICAL_PROFILE.config_digest()
    # every constant is in the digest: changing a nested one changes it
    heavier = dataclasses.replace(
        LEXICAL_PROFILE.config,
        lexical=dataclasses.replace(LEXICAL_PROFILE.config.lexical, field_weights=FieldWeights(primary=3.5)),
    )
    assert Profile("lexical", "3", heavier).config_digest() != LEXICAL_PROFILE.config_digest()
    with pytest.raises(dataclasses.FrozenInstanceError):
        LEXICAL_PROFILE.config.lexical.cap = 1  # type: ignore[misc]


def test_profile_round_trips_through_its_dict_form():
    for profile in (LEXICAL_PROFILE, HYBRID_PROFILE):
        back = Profile.from_dict(json.loads(json.dumps(profile.as_dict())))
        assert back == profile and back.config_digest() == profile.config_digest()


def test_profile_config_requires_fusion_exactly_with_semantic():
    with pytest.raises(ValueError):
        ProfileConfig(channels=(LEXICAL_PROFILE.channels[0], HYBRID_PROFILE.channels[1]))


# -- one channel useless: hybrid must not fall below the channel that works ---------------
#
# Small labelled sets through the Ranker's own search path. In the first the semantic
# channel is pure noise (a random vector per text); in the second the lexical channel is
# (queries share no term with their relevant records, only with distractors) while a
# synonym-aware test encoder makes the semantic channel right.


class RandomTestEncoder:
    """Pure noise: a pseudo-random unit vector per distinct text (deterministic)."""

    dim = 64

    def encode(self, texts):
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
            v = np.random.default_rng(seed).standard_normal(self.dim)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)


# concept -> (word used in records, word used in queries): never the same word.
CONCEPTS = {
    "car": ("automobile", "vehicle"),
    "doctor": ("physician", "medic"),
    "bill": ("invoice", "statement"),
    "buy": ("purchase", "acquire"),
    "house": ("residence", "dwelling"),
    "baby": ("infant", "newborn"),
    "dog": ("canine", "puppy"),
    "lawyer": ("attorney", "counsel"),
    "drink": ("beverage", "refreshment"),
    "trip": ("voyage", "journey"),
    "pay": ("salary", "wages"),
    "fix": ("repair", "mend"),
    "error": ("mistake", "blunder"),
    "big": ("enormous", "huge"),
    "fast": ("rapid", "quick"),
    "shop": ("store", "boutique"),
    "talk": ("conversation", "chat"),
    "sick": ("ill", "unwell"),
}
_CONCEPT_OF = {w: c for c, pair in CONCEPTS.items() for w in pair}


class ConceptTestEncoder:
    """Synonym-aware: a record word and its query synonym map to the same dimension;
    every other word is ignored (so shared filler words carry no semantic signal)."""

    dim = 64

    def encode(self, texts):
        order = sorted(CONCEPTS)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                if word in _CONCEPT_OF:
                    out[row, order.index(_CONCEPT_OF[word])] += 1.0
            norm = np.linalg.norm(out[row])
            if norm > 0:
                out[row] /= norm
            else:
                out[row, self.dim - 1] = 1.0
        return out


def _mrr(ranker: Ranker, profile: Profile, labelled: list[tuple[str, str]]) -> float:
    total = 0.0
    for query, target in labelled:
        order = [c.record_id for c in ranker.search("s", query, profile, valid_as_of_ms=0).candidates]
        total += 1.0 / (order.index(target) + 1) if target in order else 0.0
    return total / len(labelled)


SEMANTIC_ONLY = Profile(
    name="semantic_only_test",
    version="1",
    config=dataclasses.replace(
        HYBRID_PROFILE.config,
        lexical=dataclasses.replace(HYBRID_PROFILE.config.lexical, field_weights=FieldWeights(0, 0, 0, 0, 0)),
    ),
)


def _concept_pairs():
    names = sorted(CONCEPTS)
    return [(names[i], names[(i + 7) % len(names)]) for i in range(len(names))]


def test_noise_semantic_channel_does_not_pull_hybrid_below_lexical(tmp_path: Path):
    """Each query shares two terms with its record and one with a few distractors."""
    ranker = Ranker(tmp_path / "idx", RandomTestEncoder())
    fillers = ["budget", "deploy", "meeting", "ledger", "garden", "printer"]
    docs, labelled = [], []
    for i, (a, b) in enumerate(_concept_pairs()):
        rec_a, rec_b = CONCEPTS[a][0], CONCEPTS[b][0]
        filler = fillers[i % len(fillers)]
        docs.append(doc("s", f"mem_{i:02d}", f"Notes on the {rec_a} and the {rec_b} from last week."))
        docs.append(doc("s", f"mem_{i:02d}_x", f"The {filler} review mentioned the {rec_a} once."))
        docs.append(doc("s", f"mem_{i:02d}_y", f"A {filler} update about the {rec_b} schedule."))
        labelled.append((f"{rec_a} {rec_b}", f"mem_{i:02d}"))
    ranker.apply("s", upserts=docs, removals=[], through_cursor=1)
    lexical = _mrr(ranker, LEXICAL_PROFILE, labelled)
    hybrid = _mrr(ranker, HYBRID_PROFILE, labelled)
    ranker.close()
    assert lexical > 0.9
    assert hybrid >= lexical


def test_useless_lexical_channel_does_not_pull_hybrid_below_semantic(tmp_path: Path):
    """Queries use synonyms of their record's words and filler words of distractors only."""
    ranker = Ranker(tmp_path / "idx", ConceptTestEncoder())
    fillers = ["budget", "deploy", "meeting", "garden", "printer", "weekly"]
    docs, labelled = [], []
    names = sorted(CONCEPTS)
    for i, (a, b) in enumerate(_concept_pairs()):
        filler = fillers[i % len(fillers)]
        other = names[(i + 3) % len(names)]
        docs.append(doc("s", f"mem_{i:02d}", f"The {CONCEPTS[a][0]} and the {CONCEPTS[b][0]} were discussed."))
        docs.append(doc("s", f"mem_{i:02d}_x", f"{filler} {filler} notes on the {CONCEPTS[other][0]}."))
        labelled.append((f"{CONCEPTS[a][1]} {CONCEPTS[b][1]} {filler}", f"mem_{i:02d}"))
    ranker.apply("s", upserts=docs, removals=[], through_cursor=1)
    assert _mrr(ranker, LEXICAL_PROFILE, labelled) < 0.2  # the lexical channel only finds distractors
    semantic = _mrr(ranker, SEMANTIC_ONLY, labelled)
    hybrid = _mrr(ranker, HYBRID_PROFILE, labelled)
    ranker.close()
    assert semantic > 0.9
    assert hybrid >= semantic


def test_semantic_only_neighbours_below_the_floor_are_not_matches() -> None:
    """A query about nothing in memory gets no semantic-only filler, while a keyword hit
    and a close semantic neighbour both stay."""
    from engram.ranking import HYBRID_PROFILE
    from engram.ranking.fusion import fuse
    from engram.ranking.lexical import LexicalHit
    from engram.ranking.semantic import SemanticHit

    lexical = [LexicalHit("kw", 3.0, 0)]
    semantic = [SemanticHit("close", 0.62, 0), SemanticHit("kw", 0.30, 0), SemanticHit("far", 0.05, 0)]
    similarity = {"close": 0.62, "kw": 0.30, "far": 0.05}
    kept = {c.record_id for c in fuse(lexical, semantic, similarity, HYBRID_PROFILE.config, 0)}
    assert kept == {"kw", "close"}
    nothing = fuse([], [SemanticHit("far", 0.05, 0)], {"far": 0.05}, HYBRID_PROFILE.config, 0)
    assert nothing == []


@pytest.mark.parametrize("method", list(FusionMethod))
def test_a_record_listed_twice_by_a_channel_counts_once(method: FusionMethod):
    """Channels aggregate per record, but fusion must not misalign its candidate axis if
    one ever lists a record twice: the first (best) hit counts, once."""
    base = HYBRID_PROFILE.config
    assert base.fusion is not None
    config = dataclasses.replace(base, fusion=dataclasses.replace(base.fusion, method=method))
    tail = [(f"s{i}", 0.5 - i * 0.01) for i in range(20)]
    once = fuse(lex(("a", 5.0), ("b", 3.0)), sem(("b", 0.7), *tail), {"a": 0.3}, config, 0)
    twice = fuse(lex(("a", 5.0), ("b", 3.0), ("a", 1.0)), sem(("b", 0.7), *tail, ("b", 0.1)), {"a": 0.3}, config, 0)
    assert [wire(c) for c in twice] == [wire(c) for c in once]
    assert sorted(c.record_id for c in twice) == sorted({c.record_id for c in twice})


def test_fused_positions_read_alone_equal_the_whole_list():
    """A page reads a few positions of the fused list; each must be the contribution
    the whole list holds there (ranks, scores, absent channels as None)."""
    rng = np.random.default_rng(7)
    lexical = lex(
        *[(f"l{i}", float(s)) for i, s in enumerate(sorted(rng.uniform(0.5, 9, 40), reverse=True))], t=3 * DAY
    )
    semantic = [
        SemanticHit(f"{'l' if i % 3 == 0 else 's'}{i}", float(s), i * DAY)
        for i, s in enumerate(sorted(rng.uniform(0.1, 0.9, 50), reverse=True))
    ]
    sims = {f"l{i}": float(rng.uniform(0.0, 0.5)) for i in range(40) if i % 3}
    out = fuse(lexical, semantic, sims, HYBRID_PROFILE.config, 40 * DAY)
    whole = list(out)
    assert len(out) == len(whole) > 40
    assert list(out.ids) == [c.record_id for c in whole]
    assert [out[i] for i in range(len(out))] == whole
    assert out[-1] == whole[-1] and out[3:17] == whole[3:17] and out[::7] == whole[::7]
    assert any(c.lexical_rank is None for c in whole) and any(c.semantic_rank is None for c in whole)
    assert [wire(c) for c in out[:10]] == [wire(c) for c in whole[:10]]
    with pytest.raises(IndexError):
        out[len(whole)]
