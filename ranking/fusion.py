"""Fusion: from channel hit lists to one explained order.

Every candidate of either channel stays in the fused list (a keyword-only hit is never
dropped); fusion only decides the order. Lexical-only ranking is BM25 normalised by the
best score of the query. Hybrid ranking is chosen by ``FusionConfig.method``:

``rrf``
    Reciprocal rank fusion, ``1/(k + rank)`` summed over channels (the contract's
    reference profile). Kept because it is the documented baseline; it treats a weak
    channel as an equal voter and so falls below the strong one when a channel fails.

``adaptive_convex`` (the default)
    A convex combination of per-query normalised scores,
    ``w * lexical_norm + (1 - w) * semantic_norm``:

    * ``lexical_norm`` = (BM25 / best BM25 of the query) ** ``lexical_norm_power`` (0 when
      the record matched no term). The power (fitted, like the weight below) lowers
      records that share only common words with the query: divided by the best score
      alone, such a record keeps a large share of it, while the cosine is already
      rescaled so that a typical unrelated record scores 0.
    * ``semantic_norm`` = cosine rescaled so the best cosine is 1 and the cosine at rank
      ``semantic_floor_rank`` (the "typical unrelated record") is 0, clipped to [0, 1].
      Lexical candidates outside the semantic list get their exact cosine, so both
      channels are judged on the same candidates instead of "absent = worst".
    * ``w`` starts at ``base_lexical_weight`` and moves by ``confidence_gain`` times the
      difference of the two channels' confidence, each in [0, 1]: how far the channel's
      best score stands out from its runners-up (``(top - mean of ranks 2..n) / top`` for
      BM25, the same on the floor-rescaled cosine). A query made of a code or a rare
      name gives one BM25 spike over a flat cosine profile, so the weight shifts to
      lexical; a paraphrase with no shared term gives a flat or empty BM25 list, so it
      shifts to semantic. ``w`` is clipped to [min_lexical_weight, max_lexical_weight].
      The base, the gain and the power were fitted on the dev collections with
      leave-one-collection-out validation (``eval/RESULTS.md``), not tuned by hand.
    * The convex score is then blended with a rank term:
      ``(1 - rank_blend) * convex + rank_blend * rank_term``, where ``rank_term`` is the
      reciprocal rank of each channel (``(rrf_k + 1) / (rrf_k + rank)``, 1 at rank 1, 0
      when absent) weighted by the same ``w``. Ranks reward agreement between channels
      whose score scales do not (what makes RRF strong when both channels are decent),
      while the shared weight keeps a channel judged weak from voting as an equal.
      Equal-weighted ranks (plain RRF inside the blend) fail both one-channel-useless
      tests, so the rank term always follows ``w``. Measured figures: ``eval/RESULTS.md``.
    * Each contribution carries the query's ``w`` (``lexical_weight``): with it and the
      profile's constants a receipt is enough to recompute every fused score.

A channel's *rank* is competition ranking over its scores ("1224"): hits with equal scores
share the best rank among them, so two records with the same evidence get the same fused
score whatever order the engine returned them in (record ids are random, and an index's
order among equal scores is its insertion order). Receipts carry these ranks.

Either way ``final = relevance_weight * fused / max fused + recency_weight * recency``,
ties broken by recency (newer first) then record_id ascending.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Sequence

from ranking.lexical import LexicalHit
from ranking.profiles import FusionConfig, FusionMethod, ProfileConfig
from ranking.semantic import SemanticHit


class Contribution(NamedTuple):
    """How one candidate was scored: each channel's rank and score, then the blend.

    A named tuple rather than a frozen dataclass: a search builds one per candidate
    (hundreds), and a frozen dataclass costs twice as much to construct.
    """

    record_id: str
    lexical_rank: int | None
    lexical_score: float | None
    semantic_rank: int | None
    semantic_similarity: float | None
    fused_score: float
    recency: float
    final_score: float
    decimals: int = 6
    # The query's lexical weight in adaptive fusion (None for lexical-only and RRF). Last,
    # so a snapshot encoded before it existed still decodes positionally.
    lexical_weight: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe and rounded, so a replayed receipt is byte-identical."""

        def r(value: float | None) -> float | None:
            return None if value is None else round(float(value), self.decimals) + 0.0

        return {
            "record_id": self.record_id,
            "lexical_rank": self.lexical_rank,
            "lexical_score": r(self.lexical_score),
            "semantic_rank": self.semantic_rank,
            "semantic_similarity": r(self.semantic_similarity),
            "fused_score": r(self.fused_score),
            "recency": r(self.recency),
            "final_score": r(self.final_score),
            "lexical_weight": r(self.lexical_weight),
        }


def recency(valid_time_ms: int, valid_as_of_ms: int, half_life_ms: float) -> float:
    """exp(-ln2 * age / half_life); a record valid from the future counts as age 0."""
    age = max(0, int(valid_as_of_ms) - int(valid_time_ms))
    return math.exp(-math.log(2.0) * age / float(half_life_ms))


def _ranks(ids: Sequence[str], scores: Sequence[float]) -> dict[str, int]:
    """Competition ranks of a best-first hit list: equal scores share the best rank."""
    out: dict[str, int] = {}
    rank = 0
    for position, (record_id, score) in enumerate(zip(ids, scores), start=1):
        if position == 1 or score != scores[position - 2]:
            rank = position
        out[record_id] = rank
    return out


def _standout(scores: Sequence[float], depth: int) -> float:
    """How much the best score exceeds the mean of the next ``depth - 1``, relative to it."""
    if not scores or scores[0] <= 0:
        return 0.0
    rest = scores[1:depth]
    if not rest:
        return 1.0
    return max(0.0, min(1.0, (scores[0] - sum(rest) / len(rest)) / scores[0]))


def _lexical_norm(lexical: Sequence[LexicalHit]) -> dict[str, float]:
    top = lexical[0].score if lexical else 0.0
    return {h.record_id: (h.score / top if top > 0 else 0.0) for h in lexical}


def _adaptive_convex(
    lexical: Sequence[LexicalHit],
    semantic: Sequence[SemanticHit],
    similarity: Mapping[str, float],
    fusion: FusionConfig,
    lexical_ranks: Mapping[str, int],
    semantic_ranks: Mapping[str, int],
) -> tuple[dict[str, float], float]:
    """Fused score per candidate, and the lexical weight chosen for this query."""
    power = fusion.lexical_norm_power
    lex = {r: v**power for r, v in _lexical_norm(lexical).items()}
    sem: dict[str, float] = {}
    sem_profile: list[float] = []
    if semantic:
        top = semantic[0].similarity
        floor_rank = fusion.semantic_floor_rank
        floor = semantic[min(floor_rank, len(semantic)) - 1].similarity
        span = top - floor
        rescale = (lambda s: max(0.0, min(1.0, (s - floor) / span))) if span > 1e-9 else (lambda s: 1.0)
        sem = {r: rescale(s) for r, s in similarity.items()}
        sem.update((h.record_id, rescale(h.similarity)) for h in semantic)
        sem_profile = [rescale(h.similarity) for h in semantic]
    depth = fusion.confidence_depth
    lex_conf = _standout([h.score for h in lexical], depth) if lexical else 0.0
    sem_conf = _standout(sem_profile, depth) if sem_profile else 0.0
    if not lexical:
        weight = 0.0
    elif not semantic:
        weight = 1.0
    else:
        weight = fusion.base_lexical_weight + fusion.confidence_gain * (lex_conf - sem_conf)
        weight = max(fusion.min_lexical_weight, min(fusion.max_lexical_weight, weight))
    # Only the channels' candidates are fused, whatever else ``similarity`` may hold.
    candidates = set(lex) | {h.record_id for h in semantic}
    blend = fusion.rank_blend
    ranks = _rank_term(lexical_ranks, semantic_ranks, float(fusion.rrf_k), weight) if blend > 0.0 else {}
    return {
        r: (1.0 - blend) * (weight * lex.get(r, 0.0) + (1.0 - weight) * sem.get(r, 0.0)) + blend * ranks.get(r, 0.0)
        for r in candidates
    }, weight


def _rank_term(
    lexical_ranks: Mapping[str, int], semantic_ranks: Mapping[str, int], k: float, lexical_weight: float
) -> dict[str, float]:
    """Weighted reciprocal rank, ``w (k+1)/(k+rank_lex) + (1-w) (k+1)/(k+rank_sem)``, in [0, 1].

    Same confidence weight as the convex part, so a channel judged weak for this query
    gets a weak vote here too (plain RRF gives it an equal one).
    """
    scale = k + 1.0
    out = {r: lexical_weight * scale / (k + rank) for r, rank in lexical_ranks.items()}
    for r, rank in semantic_ranks.items():
        out[r] = out.get(r, 0.0) + (1.0 - lexical_weight) * scale / (k + rank)
    return out


def _rrf(lexical_ranks: Mapping[str, int], semantic_ranks: Mapping[str, int], k: float) -> dict[str, float]:
    fused = {r: 1.0 / (k + rank) for r, rank in lexical_ranks.items()}
    for r, rank in semantic_ranks.items():
        fused[r] = fused.get(r, 0.0) + 1.0 / (k + rank)
    return fused


def fuse(
    lexical: Sequence[LexicalHit],
    semantic: Sequence[SemanticHit] | None,
    similarity: Mapping[str, float],
    config: ProfileConfig,
    valid_as_of_ms: int,
) -> list[Contribution]:
    """Order the union of both hit lists; ``semantic`` None means a lexical-only profile.

    ``lexical`` and ``semantic`` are best-first; ``similarity`` holds the exact cosine of
    lexical candidates the semantic channel did not return (used for explanation and
    fusion); a semantic hit's own similarity always wins over an entry there.
    """
    fusion = config.fusion
    weight: float | None = None
    lexical_ranks = _ranks([h.record_id for h in lexical], [h.score for h in lexical])
    semantic_ranks = _ranks([h.record_id for h in semantic or ()], [h.similarity for h in semantic or ()])
    if semantic is None or fusion is None:
        fused = _lexical_norm(lexical)
    elif fusion.method is FusionMethod.RRF:
        fused = _rrf(lexical_ranks, semantic_ranks, float(fusion.rrf_k))
    else:
        fused, weight = _adaptive_convex(lexical, semantic, similarity, fusion, lexical_ranks, semantic_ranks)
    top = max(fused.values(), default=0.0)
    lex_by_id = {h.record_id: (lexical_ranks[h.record_id], h) for h in lexical}
    sem_by_id = {h.record_id: (semantic_ranks[h.record_id], h) for h in semantic or ()}
    relevance_weight = config.recency.relevance_weight
    recency_weight = config.recency.recency_weight
    half_life = float(config.recency.half_life_ms)
    decimals = config.score_decimals
    # A candidate only the semantic channel proposes, with a cosine below this floor, is
    # a nearest neighbour, not a match: without it a query about nothing in memory
    # would still fill the page with whatever lies closest.
    floor = -math.inf
    if fusion is not None and fusion.semantic_only_min_similarity is not None:
        floor = fusion.semantic_only_min_similarity
    out: list[Contribution] = []
    for record_id, score in fused.items():
        lex_entry = lex_by_id.get(record_id)
        sem_entry = sem_by_id.get(record_id)
        if lex_entry is None and sem_entry is not None and sem_entry[1].similarity < floor:
            continue
        valid_time = (lex_entry or sem_entry)[1].valid_time_ms  # type: ignore[index]
        fresh = recency(valid_time, valid_as_of_ms, half_life)
        normalised = score / top if top > 0 else 0.0
        sim = sem_entry[1].similarity if sem_entry else similarity.get(record_id)
        out.append(
            Contribution(
                record_id=record_id,
                lexical_rank=lex_entry[0] if lex_entry else None,
                lexical_score=lex_entry[1].score if lex_entry else None,
                semantic_rank=sem_entry[0] if sem_entry else None,
                semantic_similarity=sim,
                fused_score=score,
                recency=fresh,
                final_score=relevance_weight * normalised + recency_weight * fresh,
                decimals=decimals,
                lexical_weight=weight,
            )
        )
    out.sort(key=lambda c: (-round(c.final_score, decimals), -round(c.recency, decimals), c.record_id))
    return out
