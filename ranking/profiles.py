"""Ranking profiles: every tuning constant, pinned, versioned and digested.

A rank receipt names the profile, its version and the digest of its configuration, so a
ranking can be replayed and two rankings compared knowing they used the same knobs. That
only holds if *every* constant that changes an order lives in the profile's
:class:`ProfileConfig`; code reads the constants from here and nowhere else.

The configuration is a tree of frozen dataclasses (typed, immutable, readable without
casts); its digest is the RFC 8785 canonical JSON of its dict form
(:meth:`ProfileConfig.as_dict`), so any change to any constant changes the digest.
What each constant bought on the dev collections is recorded in ``docs/results/choices.md``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any

import rfc8785


class Channel(enum.StrEnum):
    """A retrieval channel; the value is what receipts and projection cursors name."""

    LEXICAL = "lexical"
    SEMANTIC = "semantic"


LEXICAL = Channel.LEXICAL
SEMANTIC = Channel.SEMANTIC


class FusionMethod(enum.StrEnum):
    """How two channels' hit lists become one order (see :mod:`ranking.fusion`)."""

    RRF = "rrf"
    ADAPTIVE_CONVEX = "adaptive_convex"


@dataclass(frozen=True)
class FieldWeights:
    """BM25 boost per indexed text field (0 leaves the field out of the query)."""

    primary: float = 3.0
    decision: float = 2.0
    evidence: float = 1.5
    context: float = 1.0
    source_refs: float = 0.5
    # The name a transcript line opens with ("Caroline: ...", ranking.documents.speaker);
    # every query term is also looked up there. 0: not queried.
    speaker: float = 0.0

    def get(self, name: str) -> float:
        return float(getattr(self, name))


@dataclass(frozen=True)
class LexicalConfig:
    """The lexical channel: Tantivy BM25 over weighted fields."""

    field_weights: FieldWeights = field(default_factory=FieldWeights)
    # Tantivy's BM25 constants (fixed by the engine, recorded so a receipt states them).
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    # Candidates handed to fusion; every later step (id lookup, exact cosines, fusion,
    # digests) costs time in proportion to this depth.
    cap: int = 200
    # A query of at most this many analysed tokens is a question: each distinct term
    # counts once (its function words at question_stopword_weight). A longer one is a
    # description: stop words are dropped and a content word said n times weighs
    # n ** long_query_count_power (see LexicalIndex.query_terms).
    long_query_tokens: int = 24
    long_query_count_power: float = 0.5
    # A question that asks when (ranking.query_time.asks_when) adds the words that date
    # an event ("yesterday", "last week"...) to its query at this weight; 0: off.
    when_terms_weight: float = 0.0
    # Proximity: each pair of adjacent query words (the words the query is ranked by, in
    # order) is also looked up as a phrase with ``pair_slop`` positions of play (2: the
    # two words side by side, swapped, or up to two words apart), boosted by
    # ``pair_weight`` times the field's weight, so a record holding the query's words
    # together ranks above one holding them apart (LexicalIndex.query_pairs). 0: off.
    pair_weight: float = 0.0
    pair_slop: int = 2
    # A question's function words (``question_stopwords``, matched lowercased before
    # stemming: "what", "did", "the"...) weigh ``question_stopword_weight`` instead of 1,
    # its other words being its content words (LexicalIndex.query_content). 1: as any word.
    question_stopwords: tuple[str, ...] = ()
    question_stopword_weight: float = 1.0
    # Coordination: a record holding every content word of a question (at least two)
    # scores its BM25 over those words once more, times ``coordination_weight``, so it
    # ranks above a record holding one of them many times. 0: off.
    coordination_weight: float = 0.0


class VectorStorage(enum.StrEnum):
    """How the semantic channel stores each vector component (usearch scalar kinds):
    the exact rows on disk are F32 or F16; the graph walks F32, F16 or I8 codes."""

    F32 = "f32"
    F16 = "f16"
    I8 = "i8"


class QueryPrecision(enum.StrEnum):
    """The weights a query is encoded with. Passages are always embedded at full
    precision (their vectors are the index, and seeds carry them between replicas);
    ``INT8`` runs the query through the same model with its weights quantised per
    channel (ranking.onnx_encoder), for less CPU a query (docs/results/)."""

    FLOAT32 = "float32"
    INT8 = "int8"


@dataclass(frozen=True)
class SemanticConfig:
    """The semantic channel: MiniLM passage vectors in one HNSW index (usearch) per scope.

    The graph holds each vector as a compact code (``walk``: one scaled byte per
    dimension by default) and is walked for ``rescore_for(k)`` candidates, which are then scored
    exactly from the rows kept on disk in ``storage``. ``connectivity``,
    ``expansion_add``, ``walk`` and ``storage`` shape what a scope's index is built
    with: a scope whose saved index was built otherwise is rebuilt when it opens.
    The search depth (ef) grows with the index, since recall at a fixed ef falls as the
    graph grows: ``expansion_search`` up to ``expansion_reference`` live passages, then
    scaled by (live / reference) ** ``expansion_growth`` (``expansion_for``); a search
    asking for more candidates searches at least that deep. A scope of at most
    ``exact_up_to`` live passages is not walked but scanned: every code scored, the best
    ``rescore_for(k)`` rescored exactly.
    """

    # Candidates handed to fusion (nearest neighbours asked of the index).
    cap: int = 200
    connectivity: int = 16  # M: links per node in the graph (chosen in docs/results/choices.md)
    expansion_add: int = 128  # ef_construction
    # ef and its growth with the index (chosen in docs/results/choices.md).
    expansion_search: int = 512
    expansion_reference: int = 100_000
    expansion_growth: float = 0.9
    storage: VectorStorage = VectorStorage.F16  # the exact rows, on disk
    walk: VectorStorage = VectorStorage.I8  # the graph's codes, in memory
    # A search for k passages rescores max(k * rescore_factor, rescore_min) candidates
    # exactly (chosen in docs/results/choices.md); a walk's depth is at least that.
    rescore_factor: int = 2
    rescore_min: int = 512
    # A scope of at most this many live passages finds its candidates by scoring every
    # code instead of walking the graph: no neighbour is missed for want of a path, and
    # up to here the scan is also the faster of the two (chosen in docs/results/choices.md).
    # 0 always walks the graph.
    exact_up_to: int = 15_000
    # The query encoder's weights (chosen in docs/results/choices.md); queries only, so a change
    # rebuilds nothing.
    query_precision: QueryPrecision = QueryPrecision.INT8

    def scans(self, live_passages: int) -> bool:
        """Whether an index of ``live_passages`` vectors is scanned (every code scored)."""
        return live_passages <= self.exact_up_to

    def rescore_for(self, k: int) -> int:
        """How many candidates a walk for ``k`` hands to exact rescoring."""
        return max(k * self.rescore_factor, self.rescore_min)

    def expansion_for(self, live_passages: int) -> int:
        """The search depth (ef) for an index of ``live_passages`` vectors."""
        scale = max(1.0, live_passages / self.expansion_reference) ** self.expansion_growth
        return round(self.expansion_search * scale)

    def graph(self) -> dict[str, Any]:
        """The build parameters a saved index records (and is compared with on open)."""
        return {
            "engine": "usearch",
            "metric": "ip",
            "connectivity": self.connectivity,
            "expansion_add": self.expansion_add,
            "storage": self.storage.value,
            "walk": self.walk.value,
        }


@dataclass(frozen=True)
class FusionConfig:
    """Constants of hybrid fusion; which of them apply depends on ``method``."""

    method: FusionMethod = FusionMethod.ADAPTIVE_CONVEX
    # The query's lexical weight: base + confidence_gain * (lexical - semantic
    # confidence), clipped to [min, max]; base, gain and the power of the normalised
    # BM25 fitted with leave-one-collection-out validation (docs/results/choices.md).
    base_lexical_weight: float = 0.58
    min_lexical_weight: float = 0.35
    max_lexical_weight: float = 0.85
    confidence_gain: float = 0.24
    lexical_norm_power: float = 2.0
    confidence_depth: int = 10
    semantic_floor_rank: int = 100
    rrf_k: int = 60
    # Share of the confidence-weighted reciprocal-rank term in the adaptive blend.
    rank_blend: float = 0.2
    # Semantic-only candidates below this cosine are dropped (no keyword, no meaning);
    # None keeps every semantic candidate (the channel alone, for evaluation).
    semantic_only_min_similarity: float | None = 0.2


@dataclass(frozen=True)
class RecencyBlend:
    """``final = relevance_weight * normalised relevance + recency_weight * recency``."""

    relevance_weight: float = 0.85
    recency_weight: float = 0.15
    half_life_ms: int = 30 * 24 * 3600 * 1000


@dataclass(frozen=True)
class ValidTimeConfig:
    """A query naming an absolute date, month or year (ranking.query_time): candidates
    valid inside that window get ``window_boost`` added to their final score; 0: off."""

    window_boost: float = 0.0


@dataclass(frozen=True)
class ProfileConfig:
    """Everything that changes an order. ``semantic``/``fusion`` are None for lexical-only."""

    channels: tuple[Channel, ...]
    lexical: LexicalConfig = field(default_factory=LexicalConfig)
    semantic: SemanticConfig | None = None
    fusion: FusionConfig | None = None
    recency: RecencyBlend = field(default_factory=RecencyBlend)
    score_decimals: int = 6
    valid_time: ValidTimeConfig = field(default_factory=ValidTimeConfig)

    @property
    def reads_query_time(self) -> bool:
        """Whether a search with this profile parses time in its query."""
        return self.lexical.when_terms_weight > 0 or self.valid_time.window_boost > 0

    def __post_init__(self) -> None:
        if (SEMANTIC in self.channels) != (self.semantic is not None and self.fusion is not None):
            raise ValueError("a profile has semantic and fusion settings exactly when it uses the semantic channel")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict form (enums as their values, tuples as lists), for the digest."""
        return _plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileConfig:
        """The inverse of :meth:`as_dict` (a stored snapshot's profile read back).

        A snapshot may have been written by another release, whose classes had fields
        these lack (read past) or lack fields these have (their defaults): what it
        ranked with is then named by the digest of the stored dict itself
        (:func:`config_dict_digest`), not by this read-back's."""
        lexical = _known(LexicalConfig, data["lexical"])
        fusion = data.get("fusion")
        semantic = data.get("semantic")
        return cls(
            channels=tuple(Channel(c) for c in data["channels"]),
            lexical=LexicalConfig(
                **{
                    **lexical,
                    "field_weights": FieldWeights(**_known(FieldWeights, data["lexical"]["field_weights"])),
                    "question_stopwords": tuple(lexical.get("question_stopwords", ())),
                }
            ),
            semantic=SemanticConfig(**_semantic_fields(_known(SemanticConfig, semantic))) if semantic else None,
            fusion=FusionConfig(**{**_known(FusionConfig, fusion), "method": FusionMethod(fusion["method"])})
            if fusion
            else None,
            recency=RecencyBlend(**_known(RecencyBlend, data["recency"])),
            score_decimals=int(data["score_decimals"]),
            valid_time=ValidTimeConfig(**_known(ValidTimeConfig, data.get("valid_time") or {})),
        )


def _semantic_fields(known: dict[str, Any]) -> dict[str, Any]:
    kinds: dict[str, type[enum.Enum]] = {
        "storage": VectorStorage,
        "walk": VectorStorage,
        "query_precision": QueryPrecision,
    }
    return {k: kinds[k](v) if k in kinds else v for k, v in known.items()}


def _known(kind: type, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without the keys ``kind`` (a config dataclass) has no field for."""
    names = {f.name for f in dataclasses.fields(kind)}
    return {k: v for k, v in data.items() if k in names}


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Profile:
    """A named, versioned ranking configuration."""

    name: str
    version: str
    config: ProfileConfig

    @property
    def channels(self) -> tuple[Channel, ...]:
        """The channels this profile requires, in the order they are reported."""
        return self.config.channels

    @property
    def needs_semantic(self) -> bool:
        return SEMANTIC in self.channels

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "config": self.config.as_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        return cls(str(data["name"]), str(data["version"]), ProfileConfig.from_dict(data["config"]))

    def config_digest(self) -> str:
        """``sha256:`` + hex digest of the RFC 8785 canonical JSON of the config's dict form."""
        return _config_digest(self.config)


def config_dict_digest(config: dict[str, Any]) -> str:
    """The digest of a configuration's dict form as written (:meth:`Profile.config_digest`
    of the release that wrote it, whatever fields this release's classes have)."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(config)).hexdigest()


@functools.lru_cache(maxsize=64)
def _config_digest(config: ProfileConfig) -> str:
    """Once per configuration (configurations are frozen), not once per search."""
    return config_dict_digest(config.as_dict())


# Time in the query (lexical v4, hybrid v13): a when-question adds the words that date an
# event at weight 0.5; an absolute date, month or year adds 0.5 to the final score of the
# records valid inside it. Chosen on a grid over the five locomo-dev conversations (hybrid
# 0.490 -> 0.522 nDCG@10, temporal questions 0.647 -> 0.718); no dev collection's query
# asks when, and none names a window holding a document's valid time.
# Speakers (lexical v5, hybrid v14): the name a transcript line opens with is a field of
# its own, weight 0.5, where every query term is looked up. Chosen on a grid (0.5, 1, 2,
# 3, 6) over the locomo-dev conversations, turns alone and with context: the weight under
# which hybrid moved every conversation the same way. Larger weights lift the lexical
# channel more but cost hybrid LoCoMo's adversarial questions, which name the wrong
# person on purpose (docs/results/).
# The same hybrid v14 walks an int8 graph and rescores from float16 rows on disk
# (SemanticConfig's defaults).
# Int8 queries (hybrid v15): the query is encoded by the int8 copy of the model's graph
# (SemanticConfig.query_precision), for less CPU a search; every dev collection and
# conversation within noise of v14 (docs/results/query-encoder.md).
# Scanned codes (hybrid v16): a scope of at most exact_up_to passages finds the candidates
# it rescores by scoring every int8 code in memory, not every float16 row read from disk
# (docs/results/semantic-engine.md).
# Word pairs (lexical v6, hybrid v17): each pair of adjacent query words is also looked
# up as a phrase with two positions of play, at a tenth of a word's weight. Chosen on a
# grid of the lexical channel alone over the ten dev collections (weights 0.05 to 0.3,
# slops 0, 2 and 8): at 0.1 and slop 2 none lost more than 0.002 nDCG@10, at 0.2 NPL lost
# 0.013. Hybrid moved by less than noise on every collection and conversation
# (docs/results/relevance.md).
# Questions (lexical v7, hybrid v18): a question's function words weigh 0.3, and a record
# holding all its content words (two or more) scores their BM25 once more at 0.5. Chosen
# on the lexical channel alone over the ten dev collections against the FTS5 keyword
# peer (eval/fts5_peer.py): function words at 0.2 to 0.5 lifted every conversation by
# 0.02 to 0.07 nDCG@10 and lost nothing elsewhere (at 1, plain BM25, each "what" or
# "did" outweighs a rare content word held once); the coordination clause added 0.001
# to 0.005 on every collection (docs/results/relevance.md).
QUESTION_STOPWORDS = tuple(
    sorted(
        "a an and are as at be but by did do does for from had has have how i in is it of on or our "
        "that the their they this to was we were what when where which who whom whose why will with "
        "you your".split()
    )
)
SHIPPED_LEXICAL = LexicalConfig(
    when_terms_weight=0.5,
    field_weights=FieldWeights(speaker=0.5),
    pair_weight=0.1,
    pair_slop=2,
    question_stopwords=QUESTION_STOPWORDS,
    question_stopword_weight=0.3,
    coordination_weight=0.5,
)
TIME_WINDOW = ValidTimeConfig(window_boost=0.5)
LEXICAL_PROFILE = Profile(
    name="lexical",
    version="7",
    config=ProfileConfig(channels=(LEXICAL,), lexical=SHIPPED_LEXICAL, valid_time=TIME_WINDOW),
)
HYBRID_PROFILE = Profile(
    name="lexical_and_semantic",
    version="18",
    config=ProfileConfig(
        channels=(LEXICAL, SEMANTIC),
        semantic=SemanticConfig(),
        fusion=FusionConfig(),
        lexical=SHIPPED_LEXICAL,
        valid_time=TIME_WINDOW,
    ),
)
