"""Collect per-collection reports into the cross-collection table (eval/RESULTS.md).

    python -m eval.results eval/results > eval/RESULTS.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .report import results_table

ORDER = ("cranfield", "cisi", "medline", "npl", "adi")


def main(root: str) -> None:
    reports = []
    for name in ORDER:
        path = Path(root) / name / "report.json"
        if path.exists():
            reports.append(json.loads(path.read_text()))
    print("# Relevance through engram_memory_search\n")
    print("Reproduce (one collection; each gets its own engine directory under --data-dir):\n")
    print("```\nengram eval --dataset ../shared/data/<name> --data-dir ./eval-data --out eval/results/<name>\n```\n")
    print("lexical = the engine's lexical profile (engine opened without the model); semantic = the ranker's "
          "semantic channel alone (best-passage cosine, same HNSW index); hybrid = engram_memory_search with "
          "minimum_channels lexical_and_semantic. Depth 100 through paging. nDCG@10 linear gain (trec_eval "
          "ndcg_cut_10), recall@100, MRR@10; judged queries only. 'ref RRF' is the data README's naive "
          "RRF (k=60) of raw BM25 and exact MiniLM.\n")
    print(results_table(reports))
    lines = ["| collection | lexical ms/q | semantic ms/q | hybrid ms/q | ingest s |", "|---|---|---|---|---|"]
    for rep in reports:
        t = rep["timings"]
        lines.append(f"| {rep['dataset']} | {t.get('lexical', {}).get('mean_ms', '-')} | "
                     f"{t.get('semantic', {}).get('mean_ms', '-')} | {t.get('hybrid', {}).get('mean_ms', '-')} | "
                     f"{t.get('ingest', {}).get('seconds', '-')} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "eval/results")
