"""Relevance metrics, computed by pytrec_eval exactly as trec_eval would.

* nDCG@10: trec_eval ``ndcg_cut_10`` (linear gain = the qrels grade).
* recall@100 and recall@10: trec_eval ``recall_100`` / ``recall_10`` (grades > 0 count
  as relevant); recall@10 is kept per query for the per-category figures.
* MRR@10: trec_eval ``recip_rank`` on the ranking cut to its top 10 (0 when the first
  relevant document is below rank 10).

Runs are ranked lists; they are handed to pytrec_eval with strictly decreasing scores so
its own tie-breaking (score, then docid) can never reorder them. Only judged queries (at
least one grade > 0) count; a judged query the system returned nothing for scores 0.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean

import numpy as np
import pytrec_eval

NDCG10, RECALL100, MRR10, RECALL10 = "ndcg@10", "recall@100", "mrr@10", "recall@10"
METRICS = (NDCG10, RECALL100, MRR10)
#: What each query category reports, per run.
CATEGORY_METRICS = (NDCG10, RECALL10)


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """BEIR qrels TSV (header ``query-id corpus-id score``); grades <= 0 are dropped."""
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter="\t")
        for row in reader:
            if not row or row[0] == "query-id":
                continue
            grade = int(float(row[2]))
            if grade <= 0:
                continue
            qrels.setdefault(str(row[0]), {})[str(row[1])] = grade
    return qrels


def _scored(ranking: Sequence[str], depth: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for rank, doc in enumerate(ranking[:depth], start=1):
        out.setdefault(doc, float(depth - rank + 1))
    return out


def evaluate(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Sequence[str]]) -> dict[str, dict[str, float]]:
    """Per judged query: ``{"ndcg@10", "recall@100", "mrr@10", "recall@10"}``."""
    judged = {q: dict(r) for q, r in qrels.items() if any(g > 0 for g in r.values())}
    deep = {q: _scored(run.get(q, []), 100) for q in judged}
    top10 = {q: _scored(run.get(q, []), 10) for q in judged}
    main = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10", "recall.100", "recall.10"}).evaluate(
        {q: r for q, r in deep.items() if r}
    )
    mrr = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate({q: r for q, r in top10.items() if r})
    out: dict[str, dict[str, float]] = {}
    for q in judged:
        m = main.get(q, {})
        out[q] = {
            NDCG10: float(m.get("ndcg_cut_10", 0.0)),
            RECALL100: float(m.get("recall_100", 0.0)),
            MRR10: float(mrr.get(q, {}).get("recip_rank", 0.0)),
            RECALL10: float(m.get("recall_10", 0.0)),
        }
    return out


def mean_metrics(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    if not per_query:
        return {m: 0.0 for m in METRICS}
    return {m: round(fmean(v[m] for v in per_query.values()), 4) for m in METRICS}


def paired_randomization(
    a: Sequence[float], b: Sequence[float], *, trials: int = 10_000, seed: int = 0
) -> dict[str, float]:
    """Two-sided paired randomisation test of mean(a) - mean(b) over the same queries.

    Each trial flips the sign of every per-query difference with probability 1/2; ``p``
    is the share of trials whose |mean| reaches the observed one (with the observed
    trial counted, so p is never 0). Seeded: the same runs always give the same p.
    """
    diffs = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if diffs.size == 0:
        return {"delta": 0.0, "p": 1.0}
    observed = abs(float(diffs.mean()))
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(trials, diffs.size))
    reached = int((np.abs((signs * diffs).mean(axis=1)) >= observed - 1e-12).sum())
    return {"delta": round(float(diffs.mean()), 4), "p": round((reached + 1) / (trials + 1), 4)}


def by_category(
    per_query: Mapping[str, Mapping[str, Mapping[str, float]]],
    categories: Mapping[str, str],
    *,
    paired: Sequence[str] = (),
    reference: str = "hybrid",
) -> dict[str, dict]:
    """Each query category's mean nDCG@10 and recall@10 per run, and ``reference`` tested
    against each run of ``paired`` over that category's queries (nDCG@10).

    ``per_query``: run -> query -> metrics (every run over the same judged queries).
    Queries without a category count in no category; no categories give ``{}``.
    Categories come in name order; a run's figures round as :func:`mean_metrics`.
    """
    members: dict[str, list[str]] = {}
    judged = next(iter(per_query.values()), {})
    for qid in judged:
        if qid in categories:
            members.setdefault(categories[qid], []).append(qid)
    out: dict[str, dict] = {}
    for name in sorted(members):
        qids = members[name]
        entry: dict = {
            "queries": len(qids),
            "runs": {
                run: {m: round(fmean(values[q][m] for q in qids), 4) for m in CATEGORY_METRICS}
                for run, values in per_query.items()
            },
        }
        if reference in per_query:
            entry["significance"] = {
                f"{reference}_vs_{other}": paired_randomization(
                    [per_query[reference][q][NDCG10] for q in qids], [per_query[other][q][NDCG10] for q in qids]
                )
                for other in paired
                if other in per_query and other != reference
            }
        out[name] = entry
    return out
