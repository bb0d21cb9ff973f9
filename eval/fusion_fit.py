"""Fitting the hybrid profile's lexical weight on saved channel hits, leave one collection out.

Why: how much fusion trusts each channel decides every hybrid order, and constants set by
hand on a few collections fit those collections. This fits the two constants of the
query's lexical weight, ``w = clip(base_lexical_weight + confidence_gain * (lexical -
semantic confidence))``, on the channel hits ``engram eval --save-hits`` writes, holding
out one collection at a time (a collection and its ``+ctxN`` ingests form one fold), so
the held-out figure is what an unseen collection gets.

Method. Every query is fused with :func:`ranking.fuse` (the service's own fusion, every
other constant from the profile) at fixed lexical weights on a grid between the profile's
clip bounds, and scored (nDCG@10). Its confidence difference is read back from the
receipt's ``lexical_weight`` of a fusion with base 0, gain 1 and no clip. A pair
(base, gain) then gives each query the weight ``clip(base + gain * difference)`` and the
nDCG@10 of the nearest grid weight; the pair with the best mean over the training
collections (each collection weighed equally, each query equally within it) wins an
exhaustive search. The held-out collection is then fused exactly with the fold's pair.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ranking import HYBRID_PROFILE, fuse
from ranking.lexical import LexicalHit
from ranking.profiles import FusionConfig, ProfileConfig
from ranking.semantic import SemanticHit

from .metrics import NDCG10, evaluate

DEPTH = 100


@dataclass(frozen=True)
class QueryHits:
    lexical: list[LexicalHit]
    semantic: list[SemanticHit]
    similarity: dict[str, float]


@dataclass(frozen=True)
class CollectionHits:
    """One ``hits.json.gz``: the collection's label, its qrels and each query's hits."""

    name: str
    qrels: dict[str, dict[str, int]]
    queries: dict[str, QueryHits]

    @property
    def fold(self) -> str:
        """A collection and its context-ingested variants are held out together."""
        return self.name.split(" +ctx")[0]


def load_hits(path: Path) -> CollectionHits:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    queries = {
        qid: QueryHits(
            lexical=[LexicalHit(str(r), float(s), int(t)) for r, s, t in q["lexical"]],
            semantic=[SemanticHit(str(r), float(s), int(t)) for r, s, t in q["semantic"]],
            similarity={str(r): float(s) for r, s in q["similarity"].items()},
        )
        for qid, q in data["queries"].items()
    }
    qrels = {q: {str(d): int(g) for d, g in rel.items()} for q, rel in data["qrels"].items()}
    return CollectionHits(str(data["collection"]), qrels, queries)


def _with_fusion(config: ProfileConfig, **changes: Any) -> ProfileConfig:
    assert config.fusion is not None
    return dataclasses.replace(config, fusion=dataclasses.replace(config.fusion, **changes))


def _ndcg(collection: CollectionHits, config: ProfileConfig) -> dict[str, float]:
    """nDCG@10 per query of ``collection`` fused with ``config``."""
    run = {
        qid: [c.record_id for c in fuse(h.lexical, h.semantic, h.similarity, config, 0)[:DEPTH]]
        for qid, h in collection.queries.items()
    }
    scores = evaluate({q: collection.qrels[q] for q in run}, run)
    return {q: scores[q][NDCG10] for q in run}


@dataclass(frozen=True)
class WeightTable:
    """Per query: nDCG@10 at each grid weight, and the confidence difference."""

    weights: np.ndarray
    ndcg: np.ndarray  # queries x weights
    difference: np.ndarray

    def score(self, base: float, gain: float, low: float, high: float) -> float:
        chosen = np.clip(base + gain * self.difference, low, high)
        column = np.abs(chosen[:, None] - self.weights[None, :]).argmin(axis=1)
        return float(self.ndcg[np.arange(len(column)), column].mean())


def weight_table(collection: CollectionHits, config: ProfileConfig, step: float) -> WeightTable:
    fusion = config.fusion
    assert fusion is not None
    low, high = fusion.min_lexical_weight, fusion.max_lexical_weight
    weights = np.round(np.arange(low, high + step / 2, step), 6)
    qids = sorted(collection.queries)
    columns = []
    for w in weights:
        fixed = _with_fusion(config, base_lexical_weight=float(w), confidence_gain=0.0)
        per_query = _ndcg(collection, fixed)
        columns.append([per_query[q] for q in qids])
    raw = _with_fusion(config, base_lexical_weight=0.0, confidence_gain=1.0,
                       min_lexical_weight=-1.0, max_lexical_weight=2.0)
    difference = []
    for q in qids:
        h = collection.queries[q]
        fused = fuse(h.lexical, h.semantic, h.similarity, raw, 0)
        weight = fused[0].lexical_weight if fused else None
        difference.append(0.0 if weight is None else weight)
    return WeightTable(weights, np.array(columns).T.reshape(len(qids), len(weights)), np.array(difference))


@dataclass(frozen=True)
class Grid:
    """The (base, gain) pairs searched."""

    bases: Sequence[float]
    gains: Sequence[float]


def default_grid(fusion: FusionConfig) -> Grid:
    low, high = fusion.min_lexical_weight, fusion.max_lexical_weight
    return Grid(bases=[round(x, 2) for x in np.arange(low, high + 0.005, 0.01)],
                gains=[round(x, 2) for x in np.arange(0.0, 1.5 + 0.01, 0.02)])


def best_pair(tables: Sequence[WeightTable], fusion: FusionConfig, grid: Grid) -> tuple[float, float, float]:
    """The (base, gain) with the best mean over ``tables``; ties go to the first found."""
    low, high = fusion.min_lexical_weight, fusion.max_lexical_weight
    best = (fusion.base_lexical_weight, fusion.confidence_gain, -1.0)
    for base in grid.bases:
        for gain in grid.gains:
            value = float(np.mean([t.score(base, gain, low, high) for t in tables]))
            if value > best[2] + 1e-12:
                best = (float(base), float(gain), value)
    return best


def fit(collections: Sequence[CollectionHits], *, config: ProfileConfig = HYBRID_PROFILE.config,
        step: float = 0.05, grid: Grid | None = None) -> dict[str, Any]:
    """Leave-one-collection-out fit; a JSON-ready report (see :func:`markdown`)."""
    fusion = config.fusion
    assert fusion is not None
    grid = grid or default_grid(fusion)
    tables = {c.name: weight_table(c, config, step) for c in collections}
    folds = sorted({c.fold for c in collections})
    report: dict[str, Any] = {"profile": {"base_lexical_weight": fusion.base_lexical_weight,
                                          "confidence_gain": fusion.confidence_gain},
                              "folds": [], "collections": {}}
    for fold in folds:
        train = [tables[c.name] for c in collections if c.fold != fold]
        if not train:
            continue
        base, gain, _ = best_pair(train, fusion, grid)
        report["folds"].append({"held_out": fold, "base_lexical_weight": base, "confidence_gain": gain})
        fitted = _with_fusion(config, base_lexical_weight=base, confidence_gain=gain)
        for c in collections:
            if c.fold == fold:
                report["collections"].setdefault(c.name, {})["held_out"] = _mean(_ndcg(c, fitted))
    base, gain, _ = best_pair(list(tables.values()), fusion, grid)
    report["all"] = {"base_lexical_weight": base, "confidence_gain": gain}
    fitted = _with_fusion(config, base_lexical_weight=base, confidence_gain=gain)
    for c in collections:
        entry = report["collections"].setdefault(c.name, {})
        entry["profile"] = _mean(_ndcg(c, config))
        entry["fit_on_all"] = _mean(_ndcg(c, fitted))
        best = int(tables[c.name].ndcg.mean(axis=0).argmax())
        entry["best_fixed_weight"] = float(tables[c.name].weights[best])
    return report


def _mean(values: dict[str, float]) -> float:
    return round(float(np.mean(list(values.values()))) if values else 0.0, 4)


def markdown(report: dict[str, Any]) -> str:
    p, a = report["profile"], report["all"]
    lines = [
        f"Profile: base {p['base_lexical_weight']}, gain {p['confidence_gain']}. "
        f"Fitted on every collection: base {a['base_lexical_weight']}, gain {a['confidence_gain']}.",
        "",
        "| held out | base | gain |", "|---|---|---|",
        *[f"| {f['held_out']} | {f['base_lexical_weight']} | {f['confidence_gain']} |" for f in report["folds"]],
        "",
        "| collection | profile nDCG@10 | held out (LOCO) | fitted on all | best fixed weight |",
        "|---|---|---|---|---|",
    ]
    for name, c in report["collections"].items():
        held = f"{c['held_out']:.3f}" if "held_out" in c else "-"
        lines.append(f"| {name} | {c['profile']:.3f} | {held} | {c['fit_on_all']:.3f} | {c['best_fixed_weight']} |")
    return "\n".join(lines) + "\n"
