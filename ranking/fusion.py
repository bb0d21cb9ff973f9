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
      leave-one-collection-out validation (``docs/results/choices.md``), not tuned by hand.
    * The convex score is then blended with a rank term:
      ``(1 - rank_blend) * convex + rank_blend * rank_term``, where ``rank_term`` is the
      reciprocal rank of each channel (``(rrf_k + 1) / (rrf_k + rank)``, 1 at rank 1, 0
      when absent) weighted by the same ``w``. Ranks reward agreement between channels
      whose score scales do not (what makes RRF strong when both channels are decent),
      while the shared weight keeps a channel judged weak from voting as an equal.
      Equal-weighted ranks (plain RRF inside the blend) fail both one-channel-useless
      tests, so the rank term always follows ``w``. Measured figures: ``docs/results/``.
    * Each contribution carries the query's ``w`` (``lexical_weight``): with it and the
      profile's constants a receipt is enough to recompute every fused score.

A channel's *rank* is competition ranking over its scores ("1224"): hits with equal scores
share the best rank among them, so two records with the same evidence get the same fused
score whatever order the engine returned them in (record ids are random, and an index's
order among equal scores is its insertion order). Receipts carry these ranks.

Either way ``final = relevance_weight * fused / max fused + recency_weight * recency``,
plus the profile's ``window_boost`` for a candidate valid inside the window of valid time
the query names (:mod:`ranking.query_time`), ties broken by recency (newer first) then
record_id ascending.

The arithmetic runs on numpy arrays over one candidate axis (:class:`_Candidates`: the
lexical hits, then the semantic-only ones), not per candidate in Python: a search fuses
up to 400 candidates, and fusion was the largest part of the ranker's own cost.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, overload

import numpy as np

from engram.ranking.lexical import LexicalHit
from engram.ranking.profiles import FusionConfig, FusionMethod, ProfileConfig
from engram.ranking.query_time import ValidTimeWindow
from engram.ranking.semantic import SemanticHit


class Contribution(NamedTuple):
    """How one candidate was scored: each channel's rank and score, then the blend. The
    contract's receipt publishes these fields by name (``ChannelContribution`` in
    :mod:`engram.models.outputs`), rounded to ``decimals`` places.

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


def recency(valid_time_ms: Any, valid_as_of_ms: int, half_life_ms: float) -> Any:
    """exp(-ln2 * age / half_life); a record valid from the future counts as age 0.
    Elementwise over an array of valid times."""
    age = np.maximum(0, int(valid_as_of_ms) - np.asarray(valid_time_ms, dtype=np.int64))
    return np.exp(-math.log(2.0) * age / float(half_life_ms))


class _Candidates:
    """Both channels' hits laid out on one axis: a slot per candidate, the lexical hits
    first (in their order), then the records only the semantic channel proposed.

    Both channels list a record at most once (each aggregates per record); should one list
    it twice, its first (best) hit counts, as a per-record map of the hits would keep one.
    """

    def __init__(
        self, lexical: Sequence[LexicalHit], semantic: Sequence[SemanticHit], similarity: Mapping[str, float]
    ) -> None:
        lexical, semantic = _first_hits(lexical), _first_hits(semantic)
        slot = {h.record_id: i for i, h in enumerate(lexical)}
        semantic_ids = [h.record_id for h in semantic]
        for record_id in semantic_ids:
            slot.setdefault(record_id, len(slot))
        ids = list(slot)  # insertion order: lexical hits, then the semantic-only ones
        semantic_slots = [slot[r] for r in semantic_ids]
        valid = [h.valid_time_ms for h in lexical]
        valid += [h.valid_time_ms for h, i in zip(semantic, semantic_slots) if i >= len(lexical)]
        self.ids = ids
        self.lexical_count = len(lexical)
        self.lexical_score = np.array([h.score for h in lexical], dtype=np.float64)
        self.lexical_rank = _ranks(self.lexical_score)
        self.semantic_slots = np.array(semantic_slots, dtype=np.intp)
        self.semantic_score = np.array([h.similarity for h in semantic], dtype=np.float64)
        self.semantic_rank = _ranks(self.semantic_score)
        self.valid_time = np.array(valid, dtype=np.int64)
        # Each candidate's cosine: a semantic hit's own, else the exact one of a lexical
        # candidate the semantic channel did not return (NaN: not known).
        cosine = np.full(len(ids), np.nan)
        if similarity:
            cosine[: self.lexical_count] = [similarity.get(r, np.nan) for r in ids[: self.lexical_count]]
        cosine[self.semantic_slots] = self.semantic_score
        self.cosine = cosine

    def __len__(self) -> int:
        return len(self.ids)

    def spread(self, lexical: np.ndarray | None, semantic: np.ndarray | None) -> np.ndarray:
        """Per-hit values of each channel placed on the candidate axis (0 where absent)."""
        out = np.zeros(len(self.ids))
        if lexical is not None:
            out[: self.lexical_count] = lexical
        if semantic is not None:
            out[self.semantic_slots] += semantic
        return out


def _first_hits(hits: Sequence[Any]) -> Sequence[Any]:
    """``hits`` without later repeats of a record id (the list itself when it has none)."""
    if len({h.record_id for h in hits}) == len(hits):
        return hits
    seen: set[str] = set()
    first = []
    for hit in hits:
        if hit.record_id not in seen:
            seen.add(hit.record_id)
            first.append(hit)
    return first


def _ranks(scores: np.ndarray) -> np.ndarray:
    """Competition ranks of a best-first score list: equal scores share the best rank
    among them ("1224"), whatever order the engine listed them in."""
    if len(scores) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.ones(len(scores), dtype=bool)
    starts[1:] = scores[1:] != scores[:-1]
    positions = np.arange(1, len(scores) + 1)
    return np.maximum.accumulate(np.where(starts, positions, 0))


def _standout(scores: np.ndarray, depth: int) -> float:
    """How much the best score exceeds the mean of the next ``depth - 1``, relative to it."""
    if len(scores) == 0 or scores[0] <= 0:
        return 0.0
    rest = scores[1:depth]
    if len(rest) == 0:
        return 1.0
    return max(0.0, min(1.0, float((scores[0] - rest.mean()) / scores[0])))


def _lexical_norm(scores: np.ndarray) -> np.ndarray:
    """BM25 over the query's best (the list's first); 0 when nothing scored."""
    top = scores[0] if len(scores) else 0.0
    return scores / top if top > 0 else np.zeros(len(scores))


def _adaptive_convex(c: _Candidates, fusion: FusionConfig) -> tuple[np.ndarray, float]:
    """Fused score per candidate, and the lexical weight chosen for this query."""
    lexical = c.spread(_lexical_norm(c.lexical_score) ** fusion.lexical_norm_power, None)
    semantic = np.zeros(len(c))
    profile = np.zeros(0)
    if len(c.semantic_score):
        top = c.semantic_score[0]
        floor = c.semantic_score[min(fusion.semantic_floor_rank, len(c.semantic_score)) - 1]
        span = top - floor
        known = ~np.isnan(c.cosine)
        if span > 1e-9:
            semantic[known] = np.clip((c.cosine[known] - floor) / span, 0.0, 1.0)
            profile = np.clip((c.semantic_score - floor) / span, 0.0, 1.0)
        else:
            semantic[known] = 1.0
            profile = np.ones(len(c.semantic_score))
    depth = fusion.confidence_depth
    if not c.lexical_count:
        weight = 0.0
    elif not len(c.semantic_score):
        weight = 1.0
    else:
        difference = _standout(c.lexical_score, depth) - _standout(profile, depth)
        weight = fusion.base_lexical_weight + fusion.confidence_gain * difference
        weight = max(fusion.min_lexical_weight, min(fusion.max_lexical_weight, weight))
    blend = fusion.rank_blend
    convex = weight * lexical + (1.0 - weight) * semantic
    if blend <= 0.0:
        return (1.0 - blend) * convex, weight
    return (1.0 - blend) * convex + blend * _rank_term(c, float(fusion.rrf_k), weight), weight


def _rank_term(c: _Candidates, k: float, lexical_weight: float) -> np.ndarray:
    """Weighted reciprocal rank, ``w (k+1)/(k+rank_lex) + (1-w) (k+1)/(k+rank_sem)``, in [0, 1].

    Same confidence weight as the convex part, so a channel judged weak for this query
    gets a weak vote here too (plain RRF gives it an equal one).
    """
    scale = k + 1.0
    return c.spread(
        lexical_weight * scale / (k + c.lexical_rank), (1.0 - lexical_weight) * scale / (k + c.semantic_rank)
    )


def _rrf(c: _Candidates, k: float) -> np.ndarray:
    return c.spread(1.0 / (k + c.lexical_rank), 1.0 / (k + c.semantic_rank))


def fuse(
    lexical: Sequence[LexicalHit],
    semantic: Sequence[SemanticHit] | None,
    similarity: Mapping[str, float],
    config: ProfileConfig,
    valid_as_of_ms: int,
    window: ValidTimeWindow | None = None,
) -> Sequence[Contribution]:
    """Order the union of both hit lists; ``semantic`` None means a lexical-only profile.

    ``lexical`` and ``semantic`` are best-first; ``similarity`` holds the exact cosine of
    lexical candidates the semantic channel did not return (used for explanation and
    fusion); a semantic hit's own similarity always wins over an entry there. The
    answer is a :class:`Fused` (an empty list when neither channel found anything).
    """
    fusion = config.fusion if semantic is not None else None
    c = _Candidates(lexical, semantic or (), similarity if fusion is not None else {})
    if not len(c):
        return []
    weight: float | None = None
    if fusion is None:
        fused = _lexical_norm(c.lexical_score)
    elif fusion.method is FusionMethod.RRF:
        fused = _rrf(c, float(fusion.rrf_k))
    else:
        fused, weight = _adaptive_convex(c, fusion)
    top = float(fused.max())
    normalised = fused / top if top > 0 else np.zeros(len(c))
    fresh = recency(c.valid_time, valid_as_of_ms, float(config.recency.half_life_ms))
    final = config.recency.relevance_weight * normalised + config.recency.recency_weight * fresh
    if window is not None and config.valid_time.window_boost > 0:
        inside = (c.valid_time >= window.from_ms) & (c.valid_time < window.to_ms)
        final = final + config.valid_time.window_boost * inside
    kept = np.arange(len(c))
    if fusion is not None and fusion.semantic_only_min_similarity is not None:
        # A candidate only the semantic channel proposes, with a cosine below this floor,
        # is a nearest neighbour, not a match: without it a query about nothing in memory
        # would still fill the page with whatever lies closest.
        kept = kept[~((kept >= c.lexical_count) & (c.cosine < fusion.semantic_only_min_similarity))]
    # Order: final score, then recency (newer first), then record_id, scores compared as
    # the receipt rounds them so that floating-point noise cannot split a tie.
    decimals = config.score_decimals
    order = kept[
        np.lexsort((np.array(c.ids)[kept], -np.round(fresh[kept], decimals), -np.round(final[kept], decimals)))
    ]
    semantic_rank = np.zeros(len(c), dtype=np.int64)
    semantic_rank[c.semantic_slots] = c.semantic_rank
    return Fused(c, order, semantic_rank, fused, fresh, final, decimals, weight)


def record_ids(candidates: Sequence[Contribution]) -> Sequence[str]:
    """The record ids of ``candidates`` in their order; of a :class:`Fused` list without
    making its contributions."""
    if isinstance(candidates, Fused):
        return candidates.ids
    return [c.record_id for c in candidates]


class Fused(Sequence[Contribution]):
    """The fused order, each :class:`Contribution` built when it is read.

    A search fuses hundreds of candidates and discloses a page of ten: the order and
    the record ids (``ids``, what the snapshot and its digests need) are fixed at once,
    and a contribution is made only for the positions a page, a receipt or an
    evaluation reads. Reading them all gives the same list an eager build gave.
    """

    __slots__ = (
        "ids",
        "_slot_ids",
        "_order",
        "_in_lexical",
        "_lexical_rank",
        "_lexical_score",
        "_semantic_rank",
        "_cosine",
        "_fused",
        "_fresh",
        "_final",
        "_decimals",
        "_weight",
    )

    def __init__(
        self,
        c: _Candidates,
        order: np.ndarray,
        semantic_rank: np.ndarray,
        fused: np.ndarray,
        fresh: np.ndarray,
        final: np.ndarray,
        decimals: int,
        weight: float | None,
    ) -> None:
        self._order: list[int] = order.tolist()
        #: Record ids in rank order.
        self._slot_ids = c.ids
        self.ids: list[str] = [c.ids[i] for i in self._order]
        self._in_lexical = c.lexical_count
        self._lexical_rank, self._lexical_score = c.lexical_rank, c.lexical_score
        self._semantic_rank, self._cosine = semantic_rank, c.cosine
        self._fused, self._fresh, self._final = fused, fresh, final
        self._decimals, self._weight = decimals, weight

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, index: int) -> Contribution: ...

    @overload
    def __getitem__(self, index: slice) -> list[Contribution]: ...

    def __getitem__(self, index: int | slice) -> Contribution | list[Contribution]:
        if isinstance(index, slice):
            return self._rows(self._order[index])
        return self._rows([self._order[index]])[0]  # IndexError past the end, as a list's

    def __iter__(self) -> Iterator[Contribution]:
        return iter(self._rows(self._order))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Fused({list(self)!r})"

    def _rows(self, slots: list[int]) -> list[Contribution]:
        """The contributions of these candidate slots, in this order."""
        at = np.array(slots, dtype=np.intp)
        n = self._in_lexical
        lexical = [s for s in slots if s < n]
        lexical_rank = dict(zip(lexical, self._lexical_rank[lexical].tolist()))
        lexical_score = dict(zip(lexical, self._lexical_score[lexical].tolist()))
        # tuple.__new__ fills each named tuple in C (its generated __new__ is a Python call
        # per candidate); zip gives exactly its fields.
        return list(
            map(
                tuple.__new__,
                itertools.repeat(Contribution),
                zip(
                    [self._slot_ids[s] for s in slots],
                    [lexical_rank.get(s) for s in slots],
                    [lexical_score.get(s) for s in slots],
                    [rank or None for rank in self._semantic_rank[at].tolist()],  # ranks start at 1; 0: absent
                    [None if x != x else x for x in self._cosine[at].tolist()],  # NaN: no cosine known
                    self._fused[at].tolist(),
                    self._fresh[at].tolist(),
                    self._final[at].tolist(),
                    itertools.repeat(self._decimals),
                    itertools.repeat(self._weight),
                ),
            )
        )
