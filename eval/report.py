"""Writing a relevance run down: report.json, per_query.json, report.md and plots."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from .metrics import METRICS, NDCG10

REFERENCE = {  # ../shared/data/README.md: raw engines alone, nDCG@10
    "cranfield": (0.368, 0.382, 0.416),
    "cisi": (0.309, 0.419, 0.428),
    "medline": (0.704, 0.788, 0.792),
    "npl": (0.436, 0.434, 0.496),
    "adi": (0.470, 0.498, 0.509),
    # ../shared/data/locomo-dev/SOURCE.md: one scope per conversation
    "conv-26": (0.414, 0.277, 0.373),
    "conv-30": (0.513, 0.260, 0.451),
    "conv-41": (0.469, 0.346, 0.461),
    "conv-42": (0.441, 0.259, 0.381),
    "conv-43": (0.449, 0.354, 0.462),
}


def _plots(out: Path, report: dict[str, Any], details: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    # the channels and the fusions hybrid is tested against (not the raw single engines)
    runs = {**report["channels"], **{k: v for k, v in report.get("baselines", {}).items() if k.endswith("rrf")}}
    channels = list(runs)
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(channels))
    for i, channel in enumerate(channels):
        values = [runs[channel][m] for m in METRICS]
        xs = [j + i * width for j in range(len(METRICS))]
        bars = ax.bar(xs, values, width, label=channel)
        ax.bar_label(bars, fmt="%.3f", fontsize=7)
    ax.set_xticks([j + width * (len(channels) - 1) / 2 for j in range(len(METRICS))], list(METRICS))
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{report['dataset']}: {report['queries']} judged queries, {report['docs']} docs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "metrics.png", dpi=120)
    plt.close(fig)
    written.append("metrics.png")

    per_query = details["per_query"]
    if "hybrid" in per_query and "lexical" in per_query:
        diffs = sorted(per_query["hybrid"][q][NDCG10] - per_query["lexical"][q][NDCG10] for q in per_query["hybrid"])
        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.bar(range(len(diffs)), diffs, width=1.0, color=["tab:red" if d < 0 else "tab:green" for d in diffs])
        ax.axhline(0, color="black", linewidth=0.6)
        better, worse = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        ax.set_title(
            f"{report['dataset']}: nDCG@10 hybrid - lexical per query "
            f"({better} better, {worse} worse, {len(diffs) - better - worse} equal)",
            fontsize=9,
        )
        ax.set_xlabel("queries, sorted")
        ax.set_ylabel("delta nDCG@10")
        fig.tight_layout()
        fig.savefig(out / "ndcg_delta_hybrid_vs_lexical.png", dpi=120)
        plt.close(fig)
        written.append("ndcg_delta_hybrid_vs_lexical.png")
    return written


def markdown(report: dict[str, Any], details: dict[str, Any] | None = None, plots: list[str] | None = None) -> str:
    lines = [
        f"# Relevance: {report['dataset']}",
        "",
        f"{report['docs']} documents, {report['queries']} judged queries.",
        "",
        "| channel | nDCG@10 | recall@100 | MRR@10 | mean ms/query |",
        "|---|---|---|---|---|",
    ]
    for channel, values in [*report["channels"].items(), *report.get("baselines", {}).items()]:
        ms = report["timings"].get(channel, {}).get("mean_ms", "")
        lines.append(
            f"| {channel} | {values['ndcg@10']:.3f} | {values['recall@100']:.3f} | {values['mrr@10']:.3f} | {ms} |"
        )
    ref = REFERENCE.get(report["dataset"])
    if ref:
        lines += [
            "",
            f"Raw-engine reference nDCG@10 (data README): BM25 {ref[0]:.3f}, "
            f"MiniLM exact {ref[1]:.3f}, naive RRF {ref[2]:.3f}.",
        ]
    if details:
        lines += [
            "",
            "Profiles used: "
            + ", ".join(
                f"{c} = `{v.get('profile')}` ({'+'.join(v.get('channels') or [])})"
                for c, v in details.get("profiles", {}).items()
            ),
        ]
    for pair, test in report.get("significance", {}).items():
        lines += [
            "",
            f"{pair.replace('_', ' ')}: delta nDCG@10 {test['delta']:+.4f}, paired randomisation p = {test['p']:.4f}",
        ]
    lines += category_lines(report)
    ingest = report["timings"].get("ingest", {})
    if ingest:
        lines += [
            "",
            f"Ingest: {ingest.get('ingested', 0)} new records, {ingest.get('skipped_existing', 0)} "
            f"already present, refused {ingest.get('refused', {})}, {ingest.get('seconds')} s.",
        ]
        lines += [
            f"- refused `{r['id']}`: {r['reason']}" + (f" ({r['detail']})" if r.get("detail") else "")
            for r in ingest.get("refused_records", [])
        ]
    for plot in plots or []:
        lines += ["", f"![{plot}]({plot})"]
    return "\n".join(lines) + "\n"


def category_lines(report: dict[str, Any]) -> list[str]:
    """The per-category table (nDCG@10 / recall@10 per run, hybrid's paired tests), or
    nothing when the collection's queries carry no categories."""
    sections = report.get("categories")
    if not sections:
        return []
    runs = list(next(iter(sections.values()))["runs"])
    tests = list(next(iter(sections.values())).get("significance", {}))
    lines = [
        "",
        "Per query category: nDCG@10 / recall@10; hybrid minus each run, nDCG@10 (paired p).",
        "",
        "| category | queries | " + " | ".join(runs) + "".join(f" | {t.replace('_', ' ')}" for t in tests) + " |",
        "|---|---|" + "---|" * (len(runs) + len(tests)),
    ]
    for name, entry in sections.items():
        row = f"| {name} | {entry['queries']} | " + " | ".join(
            f"{entry['runs'][r]['ndcg@10']:.3f} / {entry['runs'][r]['recall@10']:.3f}" for r in runs
        )
        row += "".join(
            f" | {entry['significance'][t]['delta']:+.3f} ({entry['significance'][t]['p']:.3f})" for t in tests
        )
        lines.append(row + " |")
    return lines


def trec_run(run: dict[str, list[str]], tag: str) -> str:
    """A run in TREC format (``qid Q0 docid rank score tag``), every returned rank."""
    lines = [
        f"{qid} Q0 {doc} {rank} {len(ranked) - rank + 1} {tag}"
        for qid, ranked in sorted(run.items())
        for rank, doc in enumerate(ranked, start=1)
    ]
    return "\n".join(lines) + ("\n" if lines else "")


def write_outputs(out: Path, report: dict[str, Any], details: dict[str, Any]) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for channel, run in details.get("runs", {}).items():
        (out / f"run.{channel}.trec").write_text(trec_run(run, f"engram-{channel}"))
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    if "hits" in details:  # channel hits for engram fusion-fit
        with gzip.open(out / "hits.json.gz", "wt", encoding="utf-8") as handle:
            json.dump(details["hits"], handle)
    # the runs are in run.<channel>.trec, the hits in hits.json.gz
    kept = {k: v for k, v in details.items() if k not in ("runs", "hits")}
    (out / "per_query.json").write_text(json.dumps(kept, indent=1) + "\n")
    plots = _plots(out, report, details)
    (out / "report.md").write_text(markdown(report, details, plots))


def label(report: dict[str, Any]) -> str:
    """The collection's name, marked when its turns were ingested with context."""
    turns = report.get("context_turns", 0)
    return report["dataset"] + (f" +ctx{turns}" if turns else "")


def results_table(reports: list[dict[str, Any]]) -> str:
    """The cross-collection table of the relevance results: every channel, the raw
    anchors, the paired test of hybrid against the better single channel, and the
    keyword-only peer (FTS5) with the lexical channel's and hybrid's paired tests."""
    head = ["| collection | docs | queries |"]
    sep = ["|---|---|---|"]
    for channel in ("lexical", "semantic", "hybrid"):
        head.append(f" {channel} nDCG@10 | {channel} R@100 | {channel} MRR@10 |")
        sep.append("---|---|---|")
    head.append(
        " raw BM25 nDCG@10 | naive RRF nDCG@10 | hybrid - best channel (p) |"
        " RRF of the channels nDCG@10 | hybrid - it (p) | hybrid - raw engines' RRF (p) |"
        " FTS5 peer nDCG@10 | lexical - it (p) | hybrid - it (p) |"
    )
    sep.append("---|---|---|---|---|---|---|---|---|")
    lines = ["".join(head), "".join(sep)]
    for rep in reports:
        row = f"| {label(rep)} | {rep['docs']:,} | {rep['queries']} |"
        for channel in ("lexical", "semantic", "hybrid"):
            v = rep["channels"].get(channel)
            row += f" {v['ndcg@10']:.3f} | {v['recall@100']:.3f} | {v['mrr@10']:.3f} |" if v else " - | - | - |"
        ref = REFERENCE.get(rep["dataset"])
        row += f" {ref[0]:.3f} | {ref[2]:.3f} |" if ref else " - | - |"
        tests = rep.get("significance", {})
        best = max(("lexical", "semantic"), key=lambda c: rep["channels"].get(c, {}).get("ndcg@10", -1.0))
        test = tests.get(f"hybrid_vs_{best}")
        row += f" {test['delta']:+.3f} ({test['p']:.3f}) |" if test else " - |"
        rrf, test = rep.get("baselines", {}).get("naive_rrf"), tests.get("hybrid_vs_naive_rrf")
        row += f" {rrf['ndcg@10']:.3f} |" if rrf else " - |"
        row += f" {test['delta']:+.3f} ({test['p']:.3f}) |" if test else " - |"
        test = tests.get("hybrid_vs_raw_rrf")
        row += f" {test['delta']:+.3f} ({test['p']:.3f}) |" if test else " - |"
        peer = rep.get("baselines", {}).get("raw_fts5")
        row += f" {peer['ndcg@10']:.3f} |" if peer else " - |"
        for channel in ("lexical", "hybrid"):
            test = tests.get(f"{channel}_vs_raw_fts5")
            row += f" {test['delta']:+.3f} ({test['p']:.3f}) |" if test else " - |"
        lines.append(row)
    return "\n".join(lines) + "\n"
