"""Collect per-collection reports into the cross-collection tables of the relevance
results page, docs/results/relevance.md (printed to stdout; the page is written by hand).

    python -m eval.results eval/results
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .report import label, results_table

CONVERSATIONS = tuple(f"conv-{n}" for n in (26, 30, 41, 42, 43))
ORDER = (
    "cranfield",
    "cisi",
    "medline",
    "npl",
    "adi",
    *(f"locomo-dev/{c}" for c in CONVERSATIONS),
    *(f"locomo-dev-ctx2/{c}" for c in CONVERSATIONS),
)


def main(root: str) -> None:
    reports = []
    for name in ORDER:
        path = Path(root) / name / "report.json"
        if path.exists():
            reports.append(json.loads(path.read_text()))
    print("# Relevance through engram_memory_search\n")
    print(
        "Reproduce (one collection; each gets its own engine directory under --data-dir; `--vectors` "
        "takes passage vectors computed once, `--context-turns 2` ingests each conversation turn with two "
        "neighbouring turns on each side as context):\n"
    )
    print(
        "```\nengram eval --dataset ../shared/data/<name> --raw-anchors --data-dir ./eval-data "
        "--out eval/results/<name>\n"
        "engram eval --dataset ../shared/data/locomo-dev/conv-26 --context-turns 2 --raw-anchors "
        "--data-dir ./eval-data --out eval/results/locomo-dev-ctx2/conv-26\n```\n"
    )
    print(
        "lexical = the engine's lexical profile (engine opened without the model); semantic = the ranker's "
        "semantic channel alone (best-passage cosine, same HNSW index); hybrid = engram_memory_search with "
        "minimum_channels lexical_and_semantic. Depth 100 through paging. nDCG@10 linear gain (trec_eval "
        "ndcg_cut_10), recall@100, MRR@10; judged queries only. 'raw BM25' and 'naive RRF' are the data "
        "READMEs' raw-engine anchors (Tantivy en_stem BM25 over title + text; RRF k=60 of BM25 and exact "
        "MiniLM). 'hybrid - best channel' is hybrid minus the better single channel, with the two-sided p "
        "of a paired randomisation test over the queries (10,000 sign flips); 'RRF of the channels' is "
        "naive RRF (k 60, every candidate, no weighting) of the very two channel lists hybrid fuses, and "
        "'hybrid - it' hybrid minus it, tested the same way; the last column tests hybrid against the raw "
        "engines' RRF itself, reproduced query by query (`engram eval --raw-anchors`, eval/raw_engines.py). "
        "Full runs (every rank) are written as "
        "run.<channel>.trec beside each report (not kept in git).\n"
    )
    print(results_table(reports))
    for group in ("locomo-dev", "locomo-dev-ctx2"):
        members = [
            json.loads((Path(root) / group / c / "report.json").read_text())
            for c in CONVERSATIONS
            if (Path(root) / group / c / "report.json").exists()
        ]
        if len(members) == len(CONVERSATIONS):
            means = {
                ch: sum(m["channels"][ch]["ndcg@10"] for m in members) / len(members)
                for ch in ("lexical", "semantic", "hybrid")
            }
            if all("naive_rrf" in m.get("baselines", {}) for m in members):
                means["RRF of the channels"] = sum(m["baselines"]["naive_rrf"]["ndcg@10"] for m in members) / len(
                    members
                )
            print(
                f"{group} mean nDCG@10 over the five conversations: "
                + ", ".join(f"{ch} {v:.3f}" for ch, v in means.items())
                + " (raw BM25 0.457, naive RRF 0.426).\n"
            )
    lines = ["| collection | lexical ms/q | semantic ms/q | hybrid ms/q | ingest s |", "|---|---|---|---|---|"]
    for rep in reports:
        t = rep["timings"]
        lines.append(
            f"| {label(rep)} | {t.get('lexical', {}).get('mean_ms', '-')} | "
            f"{t.get('semantic', {}).get('mean_ms', '-')} | {t.get('hybrid', {}).get('mean_ms', '-')} | "
            f"{t.get('ingest', {}).get('seconds', '-')} |"
        )
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "eval/results")
