"""Fitting the hybrid profile's fusion constants on saved channel hits, leave one collection out.

Why: how much fusion trusts each channel decides every hybrid order, and constants set by
hand on a few collections fit those collections. This fits the two constants of the
query's lexical weight, ``w = clip(base_lexical_weight + confidence_gain * (lexical -
semantic confidence))``, and the power of the normalised BM25 (``lexical_norm_power``),
on the channel hits ``engram eval --save-hits`` writes, holding out one collection at a
time (a collection and its ``+ctxN`` ingests form one fold), so the held-out figure is
what an unseen collection gets.

Method. Every query is fused with :func:`ranking.fuse` (the service's own fusion, every
other constant from the profile) at fixed lexical weights on a grid between the profile's
clip bounds, and scored (nDCG@10). Its confidence difference is read back from the
receipt's ``lexical_weight`` of a fusion with base 0, gain 1 and no clip. A pair
(base, gain) then gives each query the weight ``clip(base + gain * difference)`` and the
nDCG@10 of the nearest grid weight; the pair with the best mean over the training
collections (each collection weighed equally, each query equally within it) wins an
exhaustive search. That search is repeated with the tables built at each power of the
grid, and the best (power, base, gain) wins. The held-out collection is then fused
exactly with the fold's triple, and compared query by query with the profile's own
constants (the paired randomisation test ``engram eval`` reports).

A query's window of valid time (saved with its hits) gets the profile's window boost
after fusion, as in a search, so the fit scores what the engine would rank.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engram.ranking import HYBRID_PROFILE, FusionConfig, LexicalHit, ProfileConfig, SemanticHit, ValidTimeWindow, fuse

from .metrics import NDCG10, evaluate, paired_randomization

DEPTH = 100


@dataclass(frozen=True)
class QueryHits:
    lexical: list[LexicalHit]
    semantic: list[SemanticHit]
    similarity: dict[str, float]
    #: The window of valid time the query names, boosted after fusion as the engine does.
    window: ValidTimeWindow | None = None


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
            window=ValidTimeWindow(int(q["window"][0]), int(q["window"][1]), "", "") if q.get("window") else None,
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
        qid: [c.record_id for c in fuse(h.lexical, h.semantic, h.similarity, config, 0, h.window)[:DEPTH]]
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
    raw = _with_fusion(
        config, base_lexical_weight=0.0, confidence_gain=1.0, min_lexical_weight=-1.0, max_lexical_weight=2.0
    )
    difference = []
    for q in qids:
        h = collection.queries[q]
        fused = fuse(h.lexical, h.semantic, h.similarity, raw, 0)
        weight = fused[0].lexical_weight if fused else None
        difference.append(0.0 if weight is None else weight)
    return WeightTable(weights, np.array(columns).T.reshape(len(qids), len(weights)), np.array(difference))


@dataclass(frozen=True)
class Grid:
    """The (base, gain) pairs searched, at each power of the normalised BM25."""

    bases: Sequence[float]
    gains: Sequence[float]
    powers: Sequence[float] = (1.0, 1.5, 2.0, 2.5, 3.0)


def default_grid(fusion: FusionConfig) -> Grid:
    low, high = fusion.min_lexical_weight, fusion.max_lexical_weight
    return Grid(
        bases=[round(x, 2) for x in np.arange(low, high + 0.005, 0.01)],
        gains=[round(x, 2) for x in np.arange(0.0, 1.5 + 0.01, 0.02)],
    )


_Fit = tuple[float, float, float, float]  # power, base, gain, training mean


def best_triple(tables: Mapping[float, Sequence[WeightTable]], fusion: FusionConfig, grid: Grid) -> _Fit:
    """The (power, base, gain) with the best mean over each power's ``tables``; ties go
    to the first power of the grid."""
    best: _Fit = (fusion.lexical_norm_power, fusion.base_lexical_weight, fusion.confidence_gain, -1.0)
    for power in grid.powers:
        base, gain, value = best_pair(tables[power], fusion, grid)
        if value > best[3] + 1e-12:
            best = (float(power), base, gain, value)
    return best


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


def fit(
    collections: Sequence[CollectionHits],
    *,
    config: ProfileConfig = HYBRID_PROFILE.config,
    step: float = 0.05,
    grid: Grid | None = None,
) -> dict[str, Any]:
    """Leave-one-collection-out fit; a JSON-ready report (see :func:`markdown`)."""
    fusion = config.fusion
    assert fusion is not None
    grid = grid or default_grid(fusion)
    tables = {
        power: {
            c.name: weight_table(c, _with_fusion(config, lexical_norm_power=float(power)), step) for c in collections
        }
        for power in grid.powers
    }
    folds = sorted({c.fold for c in collections})
    report: dict[str, Any] = {
        "profile": _constants(fusion.lexical_norm_power, fusion.base_lexical_weight, fusion.confidence_gain),
        "folds": [],
        "collections": {},
    }
    for fold in folds:
        train = {p: [t[c.name] for c in collections if c.fold != fold] for p, t in tables.items()}
        if not any(train.values()):
            continue
        power, base, gain, _ = best_triple(train, fusion, grid)
        report["folds"].append({"held_out": fold, **_constants(power, base, gain)})
        fitted = _with_fusion(config, **_constants(power, base, gain))
        for c in collections:
            if c.fold == fold:
                held_out, current = _ndcg(c, fitted), _ndcg(c, config)
                entry = report["collections"].setdefault(c.name, {})
                entry["held_out"] = _mean(held_out)
                entry["held_out_vs_profile"] = paired_randomization(
                    [held_out[q] for q in sorted(held_out)], [current[q] for q in sorted(held_out)]
                )
    power, base, gain, _ = best_triple({p: list(t.values()) for p, t in tables.items()}, fusion, grid)
    report["all"] = _constants(power, base, gain)
    fitted = _with_fusion(config, **report["all"])
    profile_power = tables.get(fusion.lexical_norm_power)
    for c in collections:
        entry = report["collections"].setdefault(c.name, {})
        entry["profile"] = _mean(_ndcg(c, config))
        entry["fit_on_all"] = _mean(_ndcg(c, fitted))
        if profile_power is not None:  # the fixed weights at the profile's own power
            best = int(profile_power[c.name].ndcg.mean(axis=0).argmax())
            entry["best_fixed_weight"] = float(profile_power[c.name].weights[best])
    return report


def _constants(power: float, base: float, gain: float) -> dict[str, float]:
    return {"lexical_norm_power": power, "base_lexical_weight": base, "confidence_gain": gain}


def _mean(values: dict[str, float]) -> float:
    return round(float(np.mean(list(values.values()))) if values else 0.0, 4)


def markdown(report: dict[str, Any]) -> str:
    p, a = report["profile"], report["all"]
    lines = [
        f"Profile: power {p['lexical_norm_power']}, base {p['base_lexical_weight']}, gain {p['confidence_gain']}. "
        f"Fitted on every collection: power {a['lexical_norm_power']}, base {a['base_lexical_weight']}, "
        f"gain {a['confidence_gain']}.",
        "",
        "| held out | power | base | gain |",
        "|---|---|---|---|",
        *[
            f"| {f['held_out']} | {f['lexical_norm_power']} | {f['base_lexical_weight']} | {f['confidence_gain']} |"
            for f in report["folds"]
        ],
        "",
        "| collection | profile nDCG@10 | held out (LOCO) | held out - profile (p) | fitted on all "
        "| best fixed weight |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in report["collections"].items():
        held = f"{c['held_out']:.3f}" if "held_out" in c else "-"
        test = c.get("held_out_vs_profile")
        paired = f"{test['delta']:+.3f} ({test['p']:.3f})" if test else "-"
        fixed = c.get("best_fixed_weight", "-")
        lines.append(f"| {name} | {c['profile']:.3f} | {held} | {paired} | {c['fit_on_all']:.3f} | {fixed} |")
    return "\n".join(lines) + "\n"
